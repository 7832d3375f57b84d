"""Pruned heads removed from the weights, so that a pruned model also computes less (Michel et
al. 2019, "Are Sixteen Heads Really Better than One?", NeurIPS; section 4.3, where pruning
speeds up inference).

A head mask (head_mask.py) zeroes a head's output but still computes it. `compact_heads` drops
the masked heads of each full-attention sublayer: with kept heads K (as row blocks of d_k),

    W^Q, W^K, W^V: (d_model, d_model) -> (K d_k, d_model)   the kept heads' output rows
    W^O:           (d_model, d_model) -> (d_model, K d_k)   the kept heads' input columns,
                                                            each scaled by its xi_h

so the sublayer computes sum over kept h of xi_h head_h W^O_h, which is what the masked model
computes (the masked heads contribute 0 there). Efficient self-attention kinds keep their masks
(their mechanisms may hold per-head state). The result is for decoding and scoring without
attention weights only: its state dict no longer fits the checkpoint's config (it is never
saved), and the weights of layers with different head counts no longer stack into one
(B, L, H, T, S) tensor.

Shapes: H heads before, K kept, d_k head size.
"""

import torch
from torch import Tensor, nn

from attnseq.attention.full import FullAttention
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.models.head_mask import attention_sites


def compact_heads(model: nn.Module) -> int:
    """Remove the masked heads of every full-attention sublayer in place; returns how many
    heads were removed. The model computes the same outputs afterwards (up to rounding)."""
    removed = 0
    for site in attention_sites(model):
        attention = site.attention
        keep = (attention.head_mask != 0).nonzero().flatten()  # (K,)
        if len(keep) == attention.heads or not isinstance(attention.mechanism, FullAttention):
            continue
        removed += attention.heads - len(keep)
        _keep_heads(attention, keep)
    return removed


def _keep_heads(attention: MultiHeadAttention, keep: Tensor) -> None:
    """Slice the projections of `attention` down to the heads `keep` (K,)."""
    d_k = attention.d_k
    rows = (keep.unsqueeze(1) * d_k + torch.arange(d_k, device=keep.device)).flatten()  # (K d_k,)
    scale = attention.head_mask[keep].repeat_interleave(d_k)  # xi_h per kept column, (K d_k,)
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(attention, name, _rows(getattr(attention, name), rows))
        out = attention.out_proj
        compact = nn.Linear(len(rows), out.out_features, bias=out.bias is not None)
        compact.to(out.weight)
        compact.weight.copy_(out.weight[:, rows] * scale.to(out.weight.dtype))
        if out.bias is not None:
            compact.bias.copy_(out.bias)
        attention.out_proj = compact
        if attention.memory is not None:  # persistent memory holds one key/value set per head
            memory = attention.memory
            memory.keys = nn.Parameter(memory.keys[keep].clone())
            memory.values = nn.Parameter(memory.values[keep].clone())
    attention.heads = len(keep)
    attention.head_mask = torch.ones_like(attention.head_mask[keep])


def _rows(linear: nn.Linear, rows: Tensor) -> nn.Linear:
    """A linear layer computing only the output features `rows` of `linear`."""
    sliced = nn.Linear(linear.in_features, len(rows), bias=linear.bias is not None)
    sliced.to(linear.weight)
    sliced.weight.copy_(linear.weight[rows])
    if linear.bias is not None:
        sliced.bias.copy_(linear.bias[rows])
    return sliced
