"""The module the training updates run through: the model, wrapped in DistributedDataParallel
under torchrun and in torch.compile when asked. Validation, decoding, `state_dict` and pad ids
use the bare model, so checkpoints hold plain parameter names and decoding stays eager."""

import torch

from attnseq.data.batching import TokenBatchSampler
from attnseq.errors import UserError
from attnseq.training.distributed import WorldInfo


def training_module(
    model: torch.nn.Module,
    world: WorldInfo,
    device: torch.device,
    compile_model: bool,
    sampler: TokenBatchSampler,
) -> torch.nn.Module:
    """DDP averages gradients across ranks, and torch.compile wraps either.

    Raises:
        UserError: data-parallel, with fewer training batches than processes.
    """
    module = model
    if world.distributed:
        if sampler.global_len and len(sampler) == 0:
            raise UserError(
                f"the training data makes {sampler.global_len} batches, fewer than the "
                f"{world.world_size} processes; lower data.max_tokens or use fewer processes"
            )
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [device.index] if device.type == "cuda" else None
        module = DistributedDataParallel(module, device_ids=device_ids)
    if compile_model:
        module = compile_for_training(module)
    return module


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
