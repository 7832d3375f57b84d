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


def as_attention_mask(mask: Tensor | None) -> Tensor | None:
    """Bring a bool mask to a shape that broadcasts against per-head scores (B, H, T, S).

    Args:
        mask: (B, S) key padding mask, (B, T, S) per-query mask, already 4-D
            (B or 1, H or 1, T or 1, S), or None.

    Returns:
        (B, 1, 1, S), (B, 1, T, S), the 4-D mask unchanged, or None.
    """
    if mask is None or mask.dim() == 4:
        return mask
    if mask.dim() == 2:
        return mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S): same keys for every head/query
    if mask.dim() == 3:
        return mask[:, None]  # (B, T, S) -> (B, 1, T, S): same for every head
    raise ValueError(
        f"attention mask must have 2, 3 or 4 dimensions, got shape {tuple(mask.shape)}"
    )


def bottom_right_causal_mask(
    query_len: int, key_len: int, device: torch.device | None = None
) -> Tensor:
    """Bool (T, S) mask in which query t (the (S - T + t)-th position) sees keys <= its position.

    For T == S this is `causal_mask`; for T < S the T queries are the newest positions after
    S - T cached ones (incremental or chunked decoding).
    """
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=key_len - query_len)
