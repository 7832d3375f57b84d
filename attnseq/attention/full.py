"""Full scaled dot-product attention, `model.attention.kind=full` (Vaswani et al. 2017,
"Attention Is All You Need", NeurIPS; section 3.2.1, eq. 1), by the fused SDPA kernel or, when
the weights are asked for, explicitly; a fully masked query row gives zeros on both paths:

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Shapes: B batch, H heads, T query positions, S key positions, d_k head size.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend

from attnseq.attention.masks import as_attention_mask, bottom_right_causal_mask, masked_softmax
from attnseq.attention.mechanism import AttentionMechanism, Heads


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v with a bool mask (True = allowed), keeping the weights.

    Args:
        q: (..., T, d_k).
        k: (..., S, d_k).
        v: (..., S, d_v).
        mask: bool broadcastable to (..., T, S), or None.
        dropout: dropout probability on the weights (0 outside training).

    Returns:
        context (..., T, d_v), computed with the dropped-out weights, and the weights
        (..., T, S) before dropout (what the model attends to, for visualization); masked
        weights are exactly 0 and a fully masked row is all zeros.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T, S)
    weights = masked_softmax(scores, mask)  # fully masked rows are all zeros, not NaN
    return F.dropout(weights, p=dropout, training=dropout > 0) @ v, weights


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout: float = 0.0,
    is_causal: bool = False,
) -> Tensor:
    """The context of `explicit_attention` through the fused SDPA kernel (no weights).

    With a bool mask, SDPA kernels may return NaN for a query row whose keys are all masked
    (0/0 in the softmax). Such rows are unmasked for the kernel and their context zeroed
    afterwards, matching `masked_softmax`.

    Args:
        q: (B, H, T, d_k); k, v: (B, H, S, d_k); mask: bool broadcastable to (B, H, T, S).
        dropout: as in `explicit_attention`.
        is_causal: SDPA's own top-left aligned causal flag (square attention without a mask).

    Returns:
        context (B, H, T, d_k).
    """
    empty_rows = None
    if mask is not None:
        empty_rows = ~mask.any(dim=-1, keepdim=True)  # (B|1, H|1, T|1, 1)
        mask = mask | empty_rows
    context = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal
    )  # (B, H, T, d_k)
    if empty_rows is not None:
        context = context.masked_fill(empty_rows, 0.0)
    return context


def fused_kernel(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float, is_causal: bool = False
) -> str:
    """The kernel `fused_attention` runs for these inputs on their device and dtype: flash
    (FlashAttention-2, Dao 2023: no mask but the causal flag, fp16/bf16 on CUDA), efficient
    (memory-efficient attention, Rabe & Staats 2021, with masks), cudnn, or math (the unfused
    composition of matmul, softmax and dropout). It is torch's own choice
    (`torch._fused_sdp_choice`, the dispatcher SDPA calls), asked without running the kernel."""
    if mask is not None:
        mask = mask | ~mask.any(dim=-1, keepdim=True)  # as fused_attention passes it
    choice = torch._fused_sdp_choice(q, k, v, mask, dropout, is_causal)
    return SDPBackend(choice).name.lower().removesuffix("_attention")


class FullAttention(AttentionMechanism):
    """softmax(q k^T / sqrt(d_k)) v over every allowed pair; self- and cross-attention."""

    kind = "full"
    self_attention_only = False

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`; fused unless the weights are asked for."""
        q, k, v = inputs.q, inputs.k, inputs.v
        query_len, key_len = q.size(2), k.size(2)
        mask = as_attention_mask(inputs.mask)
        # SDPA's own is_causal flag is top-left aligned and cannot be combined with a mask, so
        # the flag is only used for plain square causal attention; otherwise fold it into the
        # mask. One query over S >= 1 keys (a decoding step) sees every key: no mask needed.
        causal_flag = inputs.causal and mask is None and query_len == key_len
        if inputs.causal and (need_weights or not causal_flag) and query_len > 1:
            causal = bottom_right_causal_mask(query_len, key_len, q.device)  # (T, S)
            mask = causal if mask is None else mask & causal
        if need_weights:
            return explicit_attention(q, k, v, mask, inputs.dropout)
        return fused_attention(q, k, v, mask, inputs.dropout, is_causal=causal_flag), None
