"""Strided and fixed sparse attention, `model.attention.kind=strided` (Child, Gray, Radford &
Sutskever 2019, "Generating Long Sequences with Sparse Transformers", arXiv:1904.10509, section
4.2): the pattern (`sparse_pattern`) is a (T, S) mask for the fused or the explicit path, which
shows what the pattern costs in quality but saves neither memory nor time over full attention.

Shapes: B batch, H heads, T query positions, S key positions, d_k head size.
"""

import torch
from torch import Tensor

from attnseq.attention.full import explicit_attention, fused_attention
from attnseq.attention.masks import as_attention_mask
from attnseq.attention.mechanism import AttentionMechanism, Heads
from attnseq.config.choices import SparsePattern

PATTERNS = tuple(pattern.value for pattern in SparsePattern)


def sparse_pattern(
    query_positions: Tensor,
    key_positions: Tensor,
    stride: int,
    pattern: str = "strided",
    summary: int = 1,
    causal: bool = False,
) -> Tensor:
    """Bool (T, S) mask, True where query position i may attend to key position j, the union
    of Child et al.'s two subsets (section 4.2; "merged head", section 4.3), l = stride:

        strided:  A1(i) = {j : |i - j| <= l},                A2(i) = {j : (i - j) mod l = 0}
        fixed:    A1(i) = {j : floor(j / l) = floor(i / l)},  A2(i) = {j : j mod l >= l - c}

    The paper's patterns are causal (j <= i); without `causal` they are bidirectional.

    Args:
        query_positions: (T,) integer absolute positions i.
        key_positions: (S,) integer absolute positions j.
        stride: l >= 1.
        pattern: "strided" or "fixed".
        summary: c, the summary cells per block of the fixed pattern, 1 <= c <= l.
        causal: also require j <= i.
    """
    i, j = query_positions[:, None], key_positions[None, :]  # (T, 1), (1, S)
    if pattern == "strided":
        allowed = ((i - j).abs() <= stride) | ((i - j) % stride == 0)
    elif pattern == "fixed":
        allowed = (i // stride == j // stride) | (j % stride >= stride - summary)
    else:
        raise ValueError(f"unknown sparse pattern {pattern!r}; valid: {', '.join(PATTERNS)}")
    return allowed & (j <= i) if causal else allowed


class StridedSelfAttention(AttentionMechanism):
    """Attention over the union of Child et al.'s two pattern subsets.

    Args:
        stride: l >= 1.
        pattern: "strided" or "fixed".
        summary: c for the fixed pattern, 1 <= c <= l (ignored by "strided").

    Raises:
        ValueError: for a bad stride, pattern or summary.
    """

    kind = "strided"

    def __init__(self, stride: int, pattern: str = "strided", summary: int = 1) -> None:
        super().__init__()
        if stride < 1:
            raise ValueError(f"the stride must be >= 1, got {stride}")
        if pattern not in PATTERNS:
            raise ValueError(f"unknown sparse pattern {pattern!r}; valid: {', '.join(PATTERNS)}")
        if pattern == "fixed" and not 1 <= summary <= stride:
            raise ValueError(f"summary must be in 1..stride={stride}, got {summary}")
        self.stride = stride
        self.pattern = pattern
        self.summary = summary

    def extra_repr(self) -> str:
        return f"stride={self.stride}, pattern={self.pattern}, summary={self.summary}"

    def mask(self, query_positions: Tensor, key_positions: Tensor, causal: bool) -> Tensor:
        """This module's (T, S) pattern; see `sparse_pattern`."""
        return sparse_pattern(
            query_positions, key_positions, self.stride, self.pattern, self.summary, causal
        )

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`; the T queries are the last T of the S positions
        (T < S in a decoding step over every key so far)."""
        q, k, v = inputs.q, inputs.k, inputs.v
        # int32: the (T, S) temporaries of the pattern are half the size of int64 ones
        positions = torch.arange(k.size(2), dtype=torch.int32, device=q.device)  # (S,)
        mask = self.mask(positions[k.size(2) - q.size(2) :], positions, inputs.causal)  # (T, S)
        padding = as_attention_mask(inputs.mask)
        mask = mask if padding is None else mask & padding  # (B|1, 1, T, S)
        if need_weights:
            return explicit_attention(q, k, v, mask, inputs.dropout)
        return fused_attention(q, k, v, mask, inputs.dropout), None
