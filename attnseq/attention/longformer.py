"""Sliding window plus global tokens, `model.attention.kind=longformer` (Beltagy, Peters & Cohan
2020, "Longformer: The Long-Document Transformer", arXiv:2004.05150, section 3.1), with the
global tokens G = {0, ..., g - 1} the first g = `global_tokens` positions, w = model.attention.D:

    A(i) = {j : |i - j| <= w} u G   for i not in G,   A(i) = every position   for i in G
    a_ij = softmax_j(q_i . k_j / sqrt(d_k)) over j in A(i), 0 elsewhere

Shapes: B batch, H heads, N sequence length (T == S == N), d_k head size, g global tokens.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnseq.attention.full import explicit_attention
from attnseq.attention.masks import as_attention_mask, masked_softmax
from attnseq.attention.mechanism import AttentionMechanism, Heads
from attnseq.attention.sliding_window import band_blocks, checked_window


class LongformerSelfAttention(AttentionMechanism):
    """Sliding window of half-width w plus g global tokens at the start of the sequence.

    Args:
        window: w >= 1 (`model.attention.D`).
        global_tokens: g >= 0.

    Raises:
        ValueError: for window < 1 or global_tokens < 0.
    """

    kind = "longformer"
    supports_causal = False

    def __init__(self, window: int, global_tokens: int) -> None:
        super().__init__()
        if global_tokens < 0:
            raise ValueError(f"global_tokens must be >= 0, got {global_tokens}")
        self.window = checked_window(window)
        self.global_tokens = global_tokens

    def extra_repr(self) -> str:
        return f"window={self.window}, global_tokens={self.global_tokens}"

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`; O(N (w + g)) memory without weights."""
        q, k, v, key_mask, dropout = inputs.q, inputs.k, inputs.v, inputs.mask, inputs.dropout
        batch, heads, length, _ = q.shape
        g = min(self.global_tokens, length)
        band = band_blocks(q, k, v, key_mask, self.window, causal=False)
        band_mask = band.mask & (band.key_index >= g)  # global keys come from the columns below
        # every query against the g global keys: (B, H, nb, b, d_k) @ (B, H, 1, d_k, g)
        global_k, global_v = k[:, :, None, :g], v[:, :, None, :g]  # (B, H, 1, g, d_k)
        global_scores = band.queries @ global_k.transpose(-2, -1) / math.sqrt(q.size(-1))
        # (B, H, nb, b, g)
        global_mask = torch.ones(1, g, dtype=torch.bool, device=q.device)
        if key_mask is not None:
            global_mask = key_mask[:, :g]
        global_mask = global_mask[:, None, None, None, :]  # (B|1, 1, 1, 1, g)
        span = band.keys.size(3)
        scores = torch.cat([band.scores(), global_scores], dim=-1)  # (B, H, nb, b, span + g)
        mask_shape = (*torch.broadcast_shapes(band_mask.shape[:-1], global_mask.shape[:-1]), -1)
        mask = torch.cat([band_mask.expand(mask_shape), global_mask.expand(mask_shape)], dim=-1)
        weights = masked_softmax(scores, mask)
        dropped = F.dropout(weights, p=dropout, training=dropout > 0)
        window_weights, column_weights = dropped[..., :span], dropped[..., span:]
        context = band.context(window_weights)  # (B, H, N, d_k)
        blocks, block = column_weights.shape[2:4]
        from_globals = (column_weights @ global_v).reshape(batch, heads, blocks * block, -1)
        context = context + from_globals[:, :, :length]
        # the global rows attend to everything
        row_context, row_weights = explicit_attention(
            q[:, :, :g], k, v, as_attention_mask(key_mask), dropout
        )  # (B, H, g, d_k), (B, H, g, N)
        context = torch.cat([row_context, context[:, :, g:]], dim=2)
        if not need_weights:
            return context, None
        dense = band.dense(weights[..., :span])  # (B, H, N, N)
        columns = weights[..., span:].reshape(batch, heads, blocks * block, g)[:, :, :length]
        dense = torch.cat([columns, dense[..., g:]], dim=-1)
        return context, torch.cat([row_weights, dense[:, :, g:]], dim=2)
