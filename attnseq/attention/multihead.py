"""Multi-head attention (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS; section
3.2.2) with a gate xi_h per head (Michel et al. 2019) and optional persistent memory slots:

    MultiHead(Q, K, V) = Concat(xi_1 head_1, ..., xi_h head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),   d_k = d_v = d_model / h

Shapes: B batch, T query positions, S key positions, N new positions (in `append_kv`) or
memory slots (in `PersistentMemory`), H heads, d_k = d_model / H.
"""

import math
from typing import Any

import torch
from torch import Tensor, nn

from attnseq.attention.full import FullAttention
from attnseq.attention.mechanism import (
    AttentionMechanism,
    Heads,
    KeyValue,
    SelfCache,
    append_positions,
)


class PersistentMemory(nn.Module):
    """N learned key and value vectors per head before the keys and values of every call
    (Sukhbaatar, Grave, Lample, Jegou & Joulin 2019, "Augmenting Self-attention with Persistent
    Memory", arXiv:1907.01470, section 3), never masked and, first, outside the causal mask:

        K' = [M_k ; K W^K],   V' = [M_v ; V W^V],   head = softmax(q K'^T / sqrt(d_k)) V'

    M_k starts as N(0, 1/d_k), at the scale of the sequence's scores, M_v as N(0, 1/N).

    Args:
        heads: H.
        slots: N >= 1.
        d_k: head size.
        show_in_weights: return the memory columns with the weights (self-attention) or only
            the sequence's columns (cross-attention, whose weights feed source alignments).
    """

    def __init__(self, heads: int, slots: int, d_k: int, show_in_weights: bool = True) -> None:
        super().__init__()
        if slots < 1:
            raise ValueError(f"memory slots must be >= 1, got {slots}")
        self.slots = slots
        self.show_in_weights = show_in_weights
        self.keys = nn.Parameter(torch.randn(heads, slots, d_k) * d_k**-0.5)  # M_k (H, N, d_k)
        self.values = nn.Parameter(torch.randn(heads, slots, d_k) * slots**-0.5)  # M_v

    def extra_repr(self) -> str:
        return f"slots={self.slots}, show_in_weights={self.show_in_weights}"

    def prepend(self, keys: Tensor, values: Tensor) -> KeyValue:
        """[M_k ; keys] and [M_v ; values]: (B, H, S, d_k) each -> (B, H, N + S, d_k)."""
        batch = keys.size(0)
        memory_k = self.keys.to(keys.dtype).expand(batch, -1, -1, -1)  # (B, H, N, d_k)
        memory_v = self.values.to(values.dtype).expand(batch, -1, -1, -1)
        return torch.cat([memory_k, keys], dim=2), torch.cat([memory_v, values], dim=2)

    def extend_mask(self, mask: Tensor | None) -> Tensor | None:
        """The mask with N allowed columns in front: (..., S) -> (..., N + S); None stays."""
        if mask is None:
            return None
        return torch.cat([mask.new_ones(*mask.shape[:-1], self.slots), mask], dim=-1)

    def arrange_weights(self, weights: Tensor | None) -> Tensor | None:
        """Weights over [memory ; sequence] (B, H, T, N + S) -> (B, H, T, S + N) with the memory
        columns last, or (B, H, T, S) without them (`show_in_weights`)."""
        if weights is None:
            return None
        sequence = weights[..., self.slots :]
        if not self.show_in_weights:
            return sequence
        return torch.cat([sequence, weights[..., : self.slots]], dim=-1)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(xi_1 head_1, ..., xi_h head_h) W^O (Vaswani et al. 2017,
    section 3.2.2); the per-head projections are one d_model x d_model layer per role, split by
    a reshape. xi = `head_mask` (H,), ones until pruning zeroes a head (Michel, Levy & Neubig
    2019, "Are Sixteen Heads Really Better than One?", NeurIPS; section 2), on every path.

    Args:
        d_model: model width; queries, keys and values all come in with this size.
        heads: number of heads H; must divide d_model.
        dropout: dropout on the attention weights (only in training mode).
        bias: whether the four projections have biases.
        mechanism: the attention function over the per-head q, k, v; None = full attention.
        memory_slots: N persistent memory vectors per head (0 = none); full attention only.
        memory_in_weights: return the memory columns with the weights (see PersistentMemory).
        scaled: the mechanism's 1/sqrt(d_k) applies (section 3.2.1); False cancels it by
            multiplying the queries by sqrt(d_k), so every mechanism computes q . k unscaled.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        mechanism: AttentionMechanism | None = None,
        memory_slots: int = 0,
        memory_in_weights: bool = True,
        scaled: bool = True,
    ) -> None:
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
        self.scaled = scaled
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q, all heads side by side
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        self.mechanism = FullAttention() if mechanism is None else mechanism
        self.register_buffer("head_mask", torch.ones(heads))  # xi_h, 1 = head kept
        self.memory: PersistentMemory | None = None
        if memory_slots > 0:
            if self.mechanism.self_attention_only:
                raise ValueError(
                    f"persistent memory needs full attention, not kind={self.mechanism.kind} "
                    "(its pattern covers the sequence's positions only)"
                )
            self.memory = PersistentMemory(heads, memory_slots, self.d_k, memory_in_weights)
        self.reset_parameters()

    @property
    def has_weights(self) -> bool:
        """Whether the mechanism can return weights (efficient.py's kernel kinds cannot)."""
        return self.mechanism.has_weights

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

    def queries(self, x: Tensor) -> Tensor:
        """Per-head queries x W^Q: (B, T, d_model) -> (B, H, T, d_k); times sqrt(d_k) when
        unscaled, which cancels the mechanism's 1/sqrt(d_k) (footnote 4: with unit-variance
        q and k, q . k has variance d_k, so large heads push the softmax into saturation)."""
        q = self._split_heads(self.q_proj(x))
        return q if self.scaled else q * math.sqrt(self.d_k)

    def _merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, T, d_k) -> (B, T, H d_k): the Concat(head_1..head_h) of section 3.2.2 (H d_k is
        d_model unless heads were removed, `compact_heads` of models/head_mask.py)."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.heads * self.d_k)

    def _mask_heads(self, context: Tensor) -> Tensor:
        """xi_h head_h: (B, H, T, d_k) scaled per head by the head mask (H,)."""
        return context * self.head_mask.to(context.dtype).view(1, self.heads, 1, 1)

    def _load_from_state_dict(
        self, state_dict: dict[str, Tensor], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # a state dict without a head mask keeps every head (load_state_dict copies the dict,
        # so the caller's is left as it is)
        state_dict.setdefault(prefix + "head_mask", torch.ones_like(self.head_mask))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _dropout(self) -> float:
        return self.dropout if self.training else 0.0

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
        return append_positions(past, *self.project_kv(key, value))

    def empty_cache(self, batch: int, like: Tensor) -> SelfCache:
        """Decoder self-attention state before the first step (dtype and device of `like`);
        for full attention empty keys and values {"self_k", "self_v"}, each (B, H, 0, d_k)."""
        return self.mechanism.empty_cache(batch, self.heads, self.d_k, like)

    def attend_cached(
        self, x: Tensor, cache: SelfCache, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, SelfCache]:
        """Causal self-attention of N new positions x (B, N, d_model) after the cached ones.

        Returns:
            output (B, N, d_model), weights (B, H, N, P + N) or None (mechanisms that keep
            only part of the past return none), and the new cache.
        """
        if self.memory is not None:  # full attention over [memory ; every position so far]
            keys, values = append_positions(
                (cache["self_k"], cache["self_v"]), *self.project_kv(x, x)
            )
            output, weights = self.attend(
                x, keys, values, is_causal=True, need_weights=need_weights
            )
            return output, weights, {"self_k": keys, "self_v": values}
        q = self.queries(x)  # (B, H, N, d_k)
        k, v = self.project_kv(x, x)  # (B, H, N, d_k) each
        new = Heads(q, k, v, dropout=self._dropout())
        context, weights, new_cache = self.mechanism.step(new, cache, need_weights)
        context = self._mask_heads(context)  # (B, H, N, d_k)
        return self.out_proj(self._merge_heads(context)), weights, new_cache

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
            mask: bool, True = allowed: (B, S), (B, T, S) or broadcastable 4-D (B, H, T, S);
                mechanisms other than full take only (B, S) and T == S.
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
            keys: (B, H, S, d_k) from `project_kv` / `append_kv`.
            values: (B, H, S, d_k).
            query, mask, is_causal, need_weights: as in `forward`.

        Returns:
            output (B, T, d_model) and weights (B, H, T, S) or None; (B, H, T, S + N) with
            memory slots shown in the weights.
        """
        q = self.queries(query)  # (B, H, T, d_k)
        if self.memory is not None:  # (B, H, N + S, d_k); the slots precede the causal mask
            keys, values = self.memory.prepend(keys, values)
            mask = self.memory.extend_mask(mask)
        context, weights = self.mechanism(
            q,
            keys,
            values,
            mask,
            causal=is_causal,
            need_weights=need_weights,
            dropout=self._dropout(),
        )  # (B, H, T, d_k)
        context = self._mask_heads(context)
        if self.memory is not None:
            weights = self.memory.arrange_weights(weights)  # (B, H, T, S [+ N])
        return self.out_proj(self._merge_heads(context)), weights
