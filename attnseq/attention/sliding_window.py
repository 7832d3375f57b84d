"""Sliding-window self-attention, `model.attention.kind=local` (Beltagy, Peters & Cohan 2020,
"Longformer: The Long-Document Transformer", arXiv:2004.05150, section 3.1, "Sliding Window";
the locality of Luong et al.'s local attention), w = `model.attention.D`:

    a_ij = softmax_j(q_i . k_j / sqrt(d_k))   over j in W(i), 0 elsewhere
    W(i) = {j : |i - j| <= w}   (encoder),   W(i) = {j : i - w <= j <= i}   (decoder)

Shapes: B batch, H heads, N sequence length (T == S == N), d_k head size, nb blocks of b
queries, span = b + 2w keys per block.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnseq.attention.full import explicit_attention, fused_attention
from attnseq.attention.masks import masked_softmax
from attnseq.attention.mechanism import AttentionMechanism, Heads, SelfCache, append_positions

MIN_BLOCK = 32  # tiny blocks make many tiny matrix products; wider ones only waste a little


@dataclass
class Band:
    """Every query block with the keys around it.

    queries: (B, H, nb, b, d_k) the zero-padded queries, blocked.
    keys: (B, H, nb, span, d_k) the keys each block may see (a strided view).
    values: (B, H, nb, span, d_k) the matching values.
    mask: bool (B or 1, 1, nb, b, span), True where j is in W(i) and a real token.
    key_index: (nb, 1, span) long, absolute key position j of each span slot (may be < 0 or
        >= N at the edges, where the mask is False).
    length: N; window: the effective w (at most N - 1); block: b.
    """

    queries: Tensor
    keys: Tensor
    values: Tensor
    mask: Tensor
    key_index: Tensor
    length: int
    window: int
    block: int

    def scores(self) -> Tensor:
        """q_i . k_j / sqrt(d_k) for the span's keys j: (B, H, nb, b, span)."""
        return self.queries @ self.keys.transpose(-2, -1) / math.sqrt(self.queries.size(-1))

    def fused_context(self, dropout: float) -> Tensor:
        """The context of the masked softmax through the fused SDPA kernel: (B, H, N, d_k).

        Heads and blocks are flattened into one batch dimension (4-D inputs take the CPU's
        memory-efficient kernel; more dimensions fall back to a slower one).
        """
        batch, heads, blocks, block, d_k = self.queries.shape
        span = self.keys.size(3)
        flat = (batch, heads * blocks)
        mask = self.mask.expand(batch, heads, blocks, block, span).reshape(*flat, block, span)
        context = fused_attention(
            self.queries.reshape(*flat, block, d_k),
            self.keys.reshape(*flat, span, d_k),
            self.values.reshape(*flat, span, d_k),
            mask,
            dropout,
        )  # (B, H * nb, b, d_k)
        return context.reshape(batch, heads, blocks * block, d_k)[:, :, : self.length]

    def context(self, weights: Tensor) -> Tensor:
        """Weights (B, H, nb, b, span) -> context (B, H, N, d_k)."""
        blocked = weights @ self.values  # (B, H, nb, b, d_k)
        batch, heads, blocks, block, d_k = blocked.shape
        return blocked.reshape(batch, heads, blocks * block, d_k)[:, :, : self.length]

    def dense(self, weights: Tensor) -> Tensor:
        """Weights (B, H, nb, b, span) -> (B, H, N, N), zero outside the band."""
        batch, heads, blocks, block, span = weights.shape
        width = blocks * block + 2 * self.window  # padded key axis
        dense = weights.new_zeros(batch, heads, blocks, block, width)
        slot = (self.key_index + self.window).expand(blocks, block, span)  # padded key index
        dense.scatter_(-1, slot.expand(batch, heads, -1, -1, -1), weights)
        dense = dense.view(batch, heads, blocks * block, width)
        return dense[:, :, : self.length, self.window : self.window + self.length]


def checked_window(window: int) -> int:
    """w itself, once it is known to be a valid half-width (>= 1).

    Raises:
        ValueError: for window < 1.
    """
    if window < 1:
        raise ValueError(f"the sliding window half-width must be >= 1, got {window}")
    return window


def band_blocks(
    q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None, window: int, causal: bool
) -> Band:
    """Blocked sliding-window queries, keys and masks: blocks of b = max(w, MIN_BLOCK) queries
    (at most N), each with the b + 2w keys around it as a strided view of the zero-padded keys.

    Args:
        q, k, v: (B, H, N, d_k).
        key_mask: (B, N) bool, True at real tokens, or None.
        window: w >= 0.
        causal: keep only j <= i.
    """
    batch, heads, length, d_k = q.shape
    w = max(0, min(window, length - 1))  # a wider window sees nothing more
    block = min(length, max(w, MIN_BLOCK))
    blocks = math.ceil(length / block)
    padded = blocks * block
    span = block + 2 * w
    queries = F.pad(q, (0, 0, 0, padded - length)).view(batch, heads, blocks, block, d_k)
    # keys w before the first and w + (padded - N) after the last position, then windows of
    # `span` keys starting every `block` positions: block c sees keys c*b - w .. c*b + b + w - 1
    # unfold puts the window last: (B, H, nb, d_k, span) -> (B, H, nb, span, d_k)
    key_windows = F.pad(k, (0, 0, w, padded - length + w)).unfold(2, span, block)
    value_windows = F.pad(v, (0, 0, w, padded - length + w)).unfold(2, span, block)

    starts = torch.arange(blocks, device=q.device) * block  # (nb,)
    key_index = starts[:, None, None] - w + torch.arange(span, device=q.device)  # (nb, 1, span)
    query_index = starts[:, None, None] + torch.arange(block, device=q.device)[:, None]
    offset = key_index - query_index  # (nb, b, span) j - i
    in_band = (offset >= -w) & (offset <= (0 if causal else w))
    real = key_mask
    if real is None:
        real = torch.ones(1, length, dtype=torch.bool, device=q.device)
    real = F.pad(real, (w, padded - length + w), value=False).unfold(1, span, block)  # (B,nb,span)
    mask = in_band & real[:, None, :, None, :]  # (B|1, 1, nb, b, span)
    return Band(
        queries=queries,
        keys=key_windows.transpose(-2, -1),
        values=value_windows.transpose(-2, -1),
        mask=mask,
        key_index=key_index,
        length=length,
        window=w,
        block=block,
    )


class SlidingWindowSelfAttention(AttentionMechanism):
    """Attention restricted to |i - j| <= w (or i - w <= j <= i when causal).

    Args:
        window: w >= 1, the half-width (`model.attention.D`).

    Raises:
        ValueError: for window < 1.
    """

    kind = "local"

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = checked_window(window)

    def extra_repr(self) -> str:
        return f"window={self.window}"

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`; O(N w) memory without weights."""
        band = band_blocks(inputs.q, inputs.k, inputs.v, inputs.mask, self.window, inputs.causal)
        if not need_weights:
            return band.fused_context(inputs.dropout), None
        weights = masked_softmax(band.scores(), band.mask)  # (B, H, nb, b, span)
        dropped = F.dropout(weights, p=inputs.dropout, training=inputs.dropout > 0)
        return band.context(dropped), band.dense(weights)  # (B, H, N, d_k), (B, H, N, N)

    def step(
        self, new: Heads, cache: SelfCache, need_weights: bool = False
    ) -> tuple[Tensor, None, SelfCache]:
        """Attend over the cached last w positions and the new ones; keep the last w."""
        past = (cache["self_k"], cache["self_v"])  # (B, H, P, d_k) each, P <= w
        keys, values = append_positions(past, new.k, new.v)  # (B, H, P + N, d_k)
        count, total = new.q.size(2), keys.size(2)
        query_index = torch.arange(total - count, total, device=keys.device)[:, None]  # (N, 1)
        offset = query_index - torch.arange(total, device=keys.device)  # (N, P + N) i - j
        allowed = (offset >= 0) & (offset <= self.window)
        context, _ = explicit_attention(new.q, keys, values, allowed)
        last = slice(max(0, total - self.window), None)  # nothing older is seen again
        return context, None, {"self_k": keys[:, :, last], "self_v": values[:, :, last]}
