"""The torch device a command runs on, from the `trainer.device` setting (auto, cpu, cuda)."""

import torch

from attnseq.errors import UserError


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; asking for cuda without one is a user error."""
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("trainer.device=cuda but no CUDA device is available; use auto or cpu")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")
