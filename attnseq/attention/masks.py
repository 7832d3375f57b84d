"""Masks and the masked softmax shared by every attention mechanism.

Convention: a mask is a bool tensor, True where attention is *allowed* (a real token),
False where it is forbidden (padding, future positions, outside a local window).
"""

import torch
from torch import Tensor


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """Bool mask (B, S), True for the first `lengths[b]` positions of row b.

    Args:
        lengths: (B,) number of real tokens per sequence.
        max_len: S; defaults to lengths.max().
    """
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)  # (S,)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)


def causal_mask(size: int, device: torch.device | None = None) -> Tensor:
    """Bool mask (T, T), True on and below the diagonal: position t sees positions <= t."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def masked_softmax(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over `dim` that gives exactly zero weight where `mask` is False.

    A row whose positions are all masked gives all zeros (not NaN): we fill with the most
    negative finite number instead of -inf, so the softmax stays finite, then zero the
    masked entries explicitly.

    Args:
        scores: (..., S) unnormalised attention energies.
        mask: bool, broadcastable to `scores`, True = allowed; None = no mask.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=dim).masked_fill(~mask, 0.0)
