"""Multi-head scaled dot-product attention (Vaswani et al. 2017, "Attention Is All You Need",
NeurIPS; section 3.2.1, eq. 1, and section 3.2.2):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                                    (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),   d_k = d_v = d_model / h

The h per-head projections W_i^Q (d_model x d_k) are stored side by side as one d_model x d_model
linear layer per role (query, key, value), then split into heads by a reshape.

Two paths compute the same thing:

- the fast path, `torch.nn.functional.scaled_dot_product_attention` (fused flash / memory-efficient
  kernels on GPU), used whenever the weights are not asked for;
- the explicit path (q k^T / sqrt(d_k), `masked_softmax`, dropout, @ v), which also returns the
  weights (B, H, T, S) for heatmaps and alignment error rates.

Masks are bool, True = allowed. A query row whose keys are all masked gets all-zero weights and a
zero context on both paths (its output is then just the bias of W^O), never NaN.

Incremental decoding: the module is pure, so key/value caches live in the caller's decoder state.
`project_kv` turns encoder memory into per-head keys/values once (cross-attention);
`append_kv` extends cached self-attention keys/values with the new steps; `attend` attends from
new queries over already-projected keys/values. With `is_causal=True` and fewer queries than keys,
the queries are the *last* T positions (bottom-right aligned causal mask), which is what a
decoding step needs. `empty_cache` and `attend_cached` wrap this for a decoder layer's
self-attention state, the interface efficient.py's mechanisms share (with other states).

Shapes: B batch, T query positions, S key positions, H heads, d_k = d_model / H.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnseq.attention.masks import masked_softmax

KeyValue = tuple[Tensor, Tensor]  # per-head keys and values, each (B, H, S, d_k)
SelfCache = dict[str, Tensor]  # a decoder layer's self-attention state, batch-first tensors


def as_attention_mask(mask: Tensor) -> Tensor:
    """Bring a bool mask to a shape that broadcasts against scores (B, H, T, S).

    Args:
        mask: (B, S) key padding mask, (B, T, S) per-query mask, or already 4-D
            (B or 1, H or 1, T or 1, S).

    Returns:
        (B, 1, 1, S), (B, 1, T, S) or the 4-D mask unchanged.
    """
    if mask.dim() == 2:
        return mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S): same keys for every head/query
    if mask.dim() == 3:
        return mask[:, None]  # (B, T, S) -> (B, 1, T, S): same for every head
    if mask.dim() == 4:
        return mask
    raise ValueError(
        f"attention mask must have 2, 3 or 4 dimensions, got shape {tuple(mask.shape)}"
    )


def bottom_right_causal_mask(
    query_len: int, key_len: int, device: torch.device | None = None
) -> Tensor:
    """Bool (T, S) mask in which query t (the (S - T + t)-th position) sees keys <= its position.

    For T == S this is the usual lower-triangular mask; for T < S the T queries are the newest
    positions after S - T cached ones (incremental or chunked decoding).
    """
    ones = torch.ones(query_len, key_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=key_len - query_len)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (Vaswani et al. 2017, section 3.2.2).

    `has_weights`: the explicit path can return weights (efficient.py's kernel kinds cannot).

    Args:
        d_model: model width; queries, keys and values all come in with this size.
        heads: number of heads H; must divide d_model.
        dropout: dropout on the attention weights (only in training mode).
        bias: whether the four projections have biases.
    """

    has_weights = True

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if heads <= 0 or d_model % heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by the number of heads ({heads}): "
                "each head gets d_k = d_model / heads dimensions"
            )
        self.d_model = d_model
        self.heads = heads
        self.d_k = d_model // heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q, all heads side by side
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections (as in the reference tensor2tensor code), zero biases."""
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(B, N, d_model) -> (B, H, N, d_k)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.d_k).transpose(1, 2)

    def _merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, T, d_k) -> (B, T, d_model): the Concat(head_1..head_h) of section 3.2.2."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.d_model)

    def project_kv(self, key: Tensor, value: Tensor) -> KeyValue:
        """Per-head keys K W^K and values V W^V.

        Args:
            key: (B, S, d_model).
            value: (B, S, d_model).

        Returns:
            keys and values, each (B, H, S, d_k).
        """
        return self._split_heads(self.k_proj(key)), self._split_heads(self.v_proj(value))

    def append_kv(self, past: KeyValue, key: Tensor, value: Tensor) -> KeyValue:
        """Extend cached self-attention keys/values with new positions.

        Args:
            past: cached keys and values, each (B, H, P, d_k); P may be 0.
            key: (B, N, d_model) the new positions.
            value: (B, N, d_model).

        Returns:
            keys and values, each (B, H, P + N, d_k).
        """
        new_k, new_v = self.project_kv(key, value)  # (B, H, N, d_k) each
        return torch.cat([past[0], new_k], dim=2), torch.cat([past[1], new_v], dim=2)

    def empty_cache(self, batch: int, like: Tensor) -> SelfCache:
        """Decoder self-attention state before the first step: empty keys and values,
        {"self_k", "self_v"} each (B, H, 0, d_k), dtype and device of `like`."""
        empty = like.new_zeros(batch, self.heads, 0, self.d_k)
        return {"self_k": empty, "self_v": empty}

    def attend_cached(
        self, x: Tensor, cache: SelfCache, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, SelfCache]:
        """Causal self-attention of N new positions x (B, N, d_model) after the cached ones.

        Returns:
            output (B, N, d_model), weights (B, H, N, P + N) or None, and the cache with the
            new keys and values appended.
        """
        keys, values = self.append_kv((cache["self_k"], cache["self_v"]), x, x)
        # the N new queries are the last N positions: bottom-right causal mask
        output, weights = self.attend(x, keys, values, is_causal=True, need_weights=need_weights)
        return output, weights, {"self_k": keys, "self_v": values}

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """MultiHead(query, key, value).

        Args:
            query: (B, T, d_model).
            key: (B, S, d_model).
            value: (B, S, d_model).
            mask: bool, True = allowed: (B, S), (B, T, S) or broadcastable 4-D (B, H, T, S).
            is_causal: additionally forbid each query to see later keys (bottom-right aligned).
            need_weights: take the explicit path and return the weights.

        Returns:
            output (B, T, d_model) and weights (B, H, T, S) or None.
        """
        keys, values = self.project_kv(key, value)
        return self.attend(
            query, keys, values, mask, is_causal=is_causal, need_weights=need_weights
        )

    def attend(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from (unprojected) queries over already projected keys and values.

        Args:
            query: (B, T, d_model).
            keys: (B, H, S, d_k) from `project_kv` / `append_kv`.
            values: (B, H, S, d_k).
            mask, is_causal, need_weights: as in `forward`.

        Returns:
            output (B, T, d_model) and weights (B, H, T, S) or None.
        """
        q = self._split_heads(self.q_proj(query))  # (B, H, T, d_k)
        query_len, key_len = q.size(2), keys.size(2)
        attn_mask = None if mask is None else as_attention_mask(mask)
        # SDPA's own is_causal flag is top-left aligned and cannot be combined with a mask, so
        # the flag is only used for plain square causal attention; otherwise fold it into the
        # mask. One query over S >= 1 keys (a decoding step) sees every key: no mask needed.
        use_causal_flag = is_causal and attn_mask is None and query_len == key_len
        if is_causal and not use_causal_flag and query_len > 1:
            causal = bottom_right_causal_mask(query_len, key_len, q.device)  # (T, S)
            attn_mask = causal if attn_mask is None else attn_mask & causal
        if need_weights:
            if use_causal_flag:
                attn_mask = bottom_right_causal_mask(query_len, key_len, q.device)
            context, weights = self._explicit(q, keys, values, attn_mask)
        else:
            context, weights = self._fused(q, keys, values, attn_mask, use_causal_flag), None
        return self.out_proj(self._merge_heads(context)), weights

    def _explicit(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """softmax(q k^T / sqrt(d_k)) v (eq. 1), keeping the weights.

        Args:
            q: (B, H, T, d_k).
            k: (B, H, S, d_k).
            v: (B, H, S, d_k).
            mask: bool broadcastable to (B, H, T, S) or None.

        Returns:
            context (B, H, T, d_k) and weights (B, H, T, S) before dropout (what the model
            attends to, for visualization); the context uses the dropped-out weights.
        """
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, T, S)
        weights = masked_softmax(scores, mask)  # fully masked rows are all zeros, not NaN
        dropped = F.dropout(weights, p=self.dropout, training=self.training)
        return dropped @ v, weights  # (B, H, T, d_k), (B, H, T, S)

    def _fused(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        """The same as `_explicit` through the fused SDPA kernel; returns context (B, H, T, d_k).

        With a bool mask, SDPA kernels may return NaN for a query row whose keys are all masked
        (0/0 in the softmax). Such rows are unmasked for the kernel and their context zeroed
        afterwards, matching `masked_softmax`.
        """
        empty_rows = None
        if mask is not None:
            empty_rows = ~mask.any(dim=-1, keepdim=True)  # (B|1, H|1, T|1, 1)
            mask = mask | empty_rows
        context = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
        )  # (B, H, T, d_k)
        if empty_rows is not None:
            context = context.masked_fill(empty_rows, 0.0)
        return context
