"""Sliding window plus global tokens, `model.attention.kind=longformer` (Beltagy, Peters & Cohan
2020, "Longformer: The Long-Document Transformer", arXiv:2004.05150, section 3.1):

    G = {0, ..., g - 1}              the global tokens: the first g = `global_tokens` positions
    A(i) = {j : |i - j| <= w} u G    for i not in G: the sliding window (w = model.attention.D)
                                     plus every global token
    A(i) = {0, ..., S - 1}           for i in G: a global token attends to every position
    a_ij = softmax_j(q_i . k_j / sqrt(d_k)) over j in A(i), 0 elsewhere

so global tokens attend to all positions and all positions attend to them (the paper's
symmetric global attention). The paper chooses global tokens per task (e.g. [CLS], question
tokens); a seq2seq source has no such token, so here they are the first g source positions,
which the encoder can learn to use as a summary. The paper computes global attention with a
second set of projections (Q_g, K_g, V_g); this implementation shares the layer's W^Q, W^K,
W^V for both, so that kind=longformer adds no parameters.

Encoder only: global tokens see (and are seen by) the whole sequence, which a causal decoder
cannot allow. With g = 0 this is kind=local.

Memory O(n (w + g)): the window part is the blocked band of sliding_window.py; the g global
columns are appended to every block's scores before one joint softmax (window slots that hold
a global token are masked so no key counts twice); the g global rows are a (g, S) attention.

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
