"""torch.compile for the training forward pass; validation and decoding stay eager."""

import torch


def compile_for_training(module: torch.nn.Module) -> torch.nn.Module:
    """`torch.compile` for the training forward pass (Ansel et al. 2024, "PyTorch 2: Faster
    Machine Learning Through Dynamic Python Bytecode Transformation and Graph Compilation").

    dynamic=True: every batch has other lengths (S, T), and compiling shape-generic kernels
    from the start avoids one recompilation per new shape. A graph that fails to compile runs
    eagerly (`suppress_errors`), so a machine without a working C++/Triton tool chain trains as
    without compile, after a warning. Decoders that loop over target positions in Python (RNNs
    with attention feeding) gain little: each loop length is traced separately.
    """
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    return torch.compile(module, dynamic=True)
