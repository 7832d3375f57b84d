"""Efficient self-attention for the transformer: `model.attention.kind` picks the mechanism that
replaces softmax(Q K^T / sqrt(d_k)) V inside multi-head self-attention.

    kind        mechanism (file)                                 memory   causal  weights
    full        Vaswani et al. 2017 (multihead.py, fused SDPA)   see (*)  yes     yes
    local       sliding window +-w (sliding_window.py)           O(n w)   yes     yes
    strided     Child et al. 2019 strided/fixed (strided.py)     O(n^2)   yes     yes
    longformer  window + global tokens, Beltagy et al. 2020      O(n(w+g)) no     yes
    linformer   E K, F V to k rows, Wang et al. 2020             O(n k)   no      effective P F
    linear      elu(x)+1 features, Katharopoulos et al. 2020     O(n d)   yes     no
    performer   FAVOR+ random features, Choromanski et al. 2021  O(n m)   yes     no

(*) the fused kernel's memory is O(n) on CPU and with flash/memory-efficient kernels on GPU; the
explicit path (weights) is O(n^2). strided realises its pattern as an n x n mask.

The W^Q, W^K, W^V, W^O projections and the head split stay those of `MultiHeadAttention`;
`EfficientSelfAttention` only hands the per-head q, k, v to the mechanism. kind=full builds the
unchanged `MultiHeadAttention`, so its fast and explicit paths are untouched.

The transformer applies the kind to encoder self-attention always and to decoder
self-attention when asked (`model.attention.decoder_self`), which needs a causal mechanism;
cross-attention stays full.

Shapes: B batch, T query positions, S key positions (T == S), N new positions of a decoding
step, H heads, d_k = d_model / H.
"""

from dataclasses import dataclass

from torch import Tensor

from attnseq.attention.linear import LinearSelfAttention
from attnseq.attention.linformer import LinformerSelfAttention
from attnseq.attention.longformer import LongformerSelfAttention
from attnseq.attention.mechanism import Cache, SelfAttentionMechanism
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.attention.performer import PerformerSelfAttention
from attnseq.attention.sliding_window import SlidingWindowSelfAttention
from attnseq.attention.strided import StridedSelfAttention

KINDS = ("full", "local", "strided", "longformer", "linformer", "linear", "performer")
CAUSAL_KINDS = ("full", "local", "strided", "linear", "performer")
WEIGHTLESS_KINDS = ("linear", "performer")


@dataclass(frozen=True)
class SelfAttentionOptions:
    """Which self-attention mechanism, and its parameters (unused ones are ignored).

    kind: one of `KINDS`.
    window: w, half-width of local and longformer windows.
    stride: l of the strided/fixed patterns; pattern: "strided" or "fixed"; summary: the
        fixed pattern's c.
    global_tokens: g, longformer's global positions (the first g).
    proj_dim: k, linformer's projected length; max_length: n, its longest sequence.
    features: m, performer's random features.
    """

    kind: str = "full"
    window: int = 5
    stride: int = 8
    pattern: str = "strided"
    summary: int = 1
    global_tokens: int = 1
    proj_dim: int = 64
    max_length: int = 1024
    features: int = 128


def build_mechanism(options: SelfAttentionOptions, d_k: int) -> SelfAttentionMechanism:
    """The mechanism for a kind other than full.

    Raises:
        ValueError: for an unknown kind (the message lists the valid ones) or bad parameters.
    """
    kind = options.kind
    if kind == "local":
        return SlidingWindowSelfAttention(options.window)
    if kind == "strided":
        return StridedSelfAttention(options.stride, options.pattern, options.summary)
    if kind == "longformer":
        return LongformerSelfAttention(options.window, options.global_tokens)
    if kind == "linformer":
        return LinformerSelfAttention(options.max_length, options.proj_dim)
    if kind == "linear":
        return LinearSelfAttention()
    if kind == "performer":
        return PerformerSelfAttention(d_k, options.features)
    raise ValueError(f"unknown self-attention kind {kind!r}; valid: {', '.join(KINDS)}")


def build_self_attention(
    options: SelfAttentionOptions | None,
    d_model: int,
    heads: int,
    dropout: float = 0.0,
    causal: bool = False,
) -> MultiHeadAttention:
    """Multi-head self-attention of the given kind (None or kind=full: the plain module).

    Args:
        causal: the module will be used for decoder self-attention.

    Raises:
        ValueError: for an unknown kind, bad parameters, or a causal use of an encoder-only
            kind (linformer, longformer).
    """
    if options is None or options.kind == "full":
        return MultiHeadAttention(d_model, heads, dropout)
    if causal and options.kind not in CAUSAL_KINDS:
        raise ValueError(
            f"attention kind={options.kind} cannot be used for decoder self-attention (it is not "
            f"causal); causal kinds: {', '.join(CAUSAL_KINDS)}"
        )
    mechanism = build_mechanism(options, d_model // heads if heads > 0 else d_model)
    return EfficientSelfAttention(d_model, heads, mechanism, dropout)


class EfficientSelfAttention(MultiHeadAttention):
    """Multi-head self-attention whose attention function is a `SelfAttentionMechanism`.

    Args:
        d_model, heads, dropout, bias: as in `MultiHeadAttention`.
        mechanism: what replaces softmax(q k^T / sqrt(d_k)) v.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        mechanism: SelfAttentionMechanism,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__(d_model, heads, dropout, bias)
        self.mechanism = mechanism

    @property
    def has_weights(self) -> bool:
        return self.mechanism.has_weights

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
        """Self-attention from the (unprojected) queries over projected keys and values.

        Args:
            query: (B, T, d_model), the same positions as the keys (T == S).
            keys, values: (B, H, S, d_k) from `project_kv`.
            mask: None or the key padding mask (B, S), True at real tokens; mechanisms other
                than full take no per-query masks.
            is_causal, need_weights: as in `MultiHeadAttention.forward`.

        Returns:
            output (B, T, d_model) and weights (B, H, T, S) or None.

        Raises:
            ValueError: for a causal use or weights the mechanism cannot give, a mask that is
                not (B, S), or T != S.
        """
        self.mechanism.check(is_causal, need_weights)
        if mask is not None and mask.dim() != 2:
            raise ValueError(
                f"attention kind={self.mechanism.kind} takes a (B, S) key padding mask, got "
                f"shape {tuple(mask.shape)}"
            )
        q = self._split_heads(self.q_proj(query))  # (B, H, T, d_k)
        if q.size(2) != keys.size(2):
            raise ValueError(
                f"attention kind={self.mechanism.kind} is self-attention: needs as many "
                f"queries as keys, got {q.size(2)} and {keys.size(2)}"
            )
        context, weights = self.mechanism(
            q,
            keys,
            values,
            mask,
            causal=is_causal,
            need_weights=need_weights,
            dropout=self.dropout if self.training else 0.0,
        )  # (B, H, T, d_k)
        return self.out_proj(self._merge_heads(context)), weights

    def empty_cache(self, batch: int, like: Tensor) -> Cache:
        self.mechanism.check(causal=True, need_weights=False)
        return self.mechanism.empty_cache(batch, self.heads, self.d_k, like)

    def attend_cached(
        self, x: Tensor, cache: Cache, need_weights: bool = False
    ) -> tuple[Tensor, None, Cache]:
        """Causal self-attention of N new positions x (B, N, d_model) after the cached ones.

        Returns:
            output (B, N, d_model), no weights (decoding steps never return self-attention
            weights), and the new cache.
        """
        q = self._split_heads(self.q_proj(x))  # (B, H, N, d_k)
        k, v = self.project_kv(x, x)  # (B, H, N, d_k) each
        context, new_cache = self.mechanism.step(q, k, v, cache)
        return self.out_proj(self._merge_heads(context)), None, new_cache
