"""The interface of the transformer's efficient self-attention mechanisms.

Full multi-head attention computes, per head, softmax(Q K^T / sqrt(d_k)) V (Vaswani et al.
2017, eq. 1) over all S x S position pairs. A *mechanism* replaces only that attention function:
it receives the per-head queries, keys and values that `MultiHeadAttention` projected (W^Q, W^K,
W^V) and returns the per-head context, which the caller merges and projects with W^O. The
mechanisms live one per file: sliding_window.py (kind=local), strided.py, longformer.py,
linformer.py, linear.py and performer.py; efficient.py plugs them into multi-head attention.

Every mechanism is self-attention: query position t and key position t are the same token, so
T == S in `forward`. Masks are the key padding mask (B, S), True at real tokens, and the causal
flag; a fully masked row gives a zero context, never NaN.

Incremental decoding (causal mechanisms only): `empty_cache` gives the per-layer state before
the first target token, `step` attends from N >= 1 new positions (the newest, after everything
already in the cache) and returns the new cache. Caches are dicts of batch-first tensors, so
`Seq2Seq.reorder_state` can select beam rows in them.

Shapes: B batch, H heads, T query positions, S key positions, N new positions, d_k head size.
"""

import abc
import math
from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from attnseq.attention.masks import masked_softmax

Cache = dict[str, Tensor]  # one decoder layer's self-attention state, batch-first tensors


class SelfAttentionMechanism(nn.Module, metaclass=abc.ABCMeta):
    """An attention function over per-head q, k, v; subclasses say what they support.

    supports_causal: can be used for decoder (causal) self-attention, with `step`.
    has_weights: can return explicit weights (B, H, T, S); kernel methods cannot.
    """

    supports_causal: ClassVar[bool] = True
    has_weights: ClassVar[bool] = True
    kind: ClassVar[str] = ""  # the config name, model.attention.kind

    @abc.abstractmethod
    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_mask: Tensor | None,
        *,
        causal: bool = False,
        need_weights: bool = False,
        dropout: float = 0.0,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend every position to the positions the mechanism allows.

        Args:
            q: (B, H, T, d_k) queries, already projected and split into heads.
            k: (B, H, S, d_k) keys, S == T.
            v: (B, H, S, d_k) values.
            key_mask: (B, S) bool, True at real tokens; None = no padding.
            causal: forbid each position to see later positions.
            need_weights: also return the weights (B, H, T, S).
            dropout: dropout probability on the attention weights (0 outside training).

        Returns:
            context (B, H, T, d_k) and weights (B, H, T, S) or None.
        """

    def empty_cache(self, batch: int, heads: int, d_k: int, like: Tensor) -> Cache:
        """The decoding state before the first step (dtype/device of `like`)."""
        self.check(causal=True, need_weights=False)  # kinds without causal use end here
        raise AssertionError("a mechanism that supports causal use must override this")

    def step(self, q: Tensor, k: Tensor, v: Tensor, cache: Cache) -> tuple[Tensor, Cache]:
        """Causal attention from N new positions over everything so far.

        Args:
            q, k, v: (B, H, N, d_k) of the new positions.
            cache: from `empty_cache` or the previous `step` (not modified).

        Returns:
            context (B, H, N, d_k) and the new cache.
        """
        self.check(causal=True, need_weights=False)  # kinds without causal use end here
        raise AssertionError("a mechanism that supports causal use must override this")

    def check(self, causal: bool, need_weights: bool) -> None:
        """Reject what this mechanism cannot do with a message that says why."""
        if causal and not self.supports_causal:
            raise ValueError(
                f"attention kind={self.kind} cannot be causal: it mixes every position of the "
                "sequence before attending, so it can only be used for encoder self-attention"
            )
        if need_weights and not self.has_weights:
            raise ValueError(
                f"attention kind={self.kind} has no attention weights to return: it computes "
                "phi(Q) (phi(K)^T V) right to left and never forms the T x S matrix "
                "phi(Q) phi(K)^T; call it with need_weights=False"
            )


def explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v with a bool mask (True = allowed), keeping the weights.

    Used where the pattern is small or dense (decoding steps, global rows, strided weights).

    Args:
        q: (..., T, d_k).
        k: (..., S, d_k).
        v: (..., S, d_v).
        mask: bool broadcastable to (..., T, S), or None.

    Returns:
        context (..., T, d_v) and weights (..., T, S) before dropout; masked weights are
        exactly 0 and a fully masked row is all zeros.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T, S)
    weights = masked_softmax(scores, mask)
    return F.dropout(weights, p=dropout, training=dropout > 0) @ v, weights


def fused_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float = 0.0
) -> Tensor:
    """The same context as `explicit_attention` through the fused SDPA kernel (no weights).

    Rows whose keys are all masked would be 0/0 in some kernels: they are unmasked for the
    kernel and their context zeroed afterwards (as in multihead.py).

    Args:
        q: (B, H, T, d_k); k, v: (B, H, S, d_k); mask: bool broadcastable to (B, H, T, S).

    Returns:
        context (B, H, T, d_k).
    """
    empty_rows = None
    if mask is not None:
        empty_rows = ~mask.any(dim=-1, keepdim=True)  # (..., T, 1)
        mask = mask | empty_rows
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
    if empty_rows is not None:
        context = context.masked_fill(empty_rows, 0.0)
    return context


def key_mask_4d(key_mask: Tensor | None) -> Tensor | None:
    """(B, S) key padding mask -> (B, 1, 1, S), broadcastable against (B, H, T, S)."""
    return None if key_mask is None else key_mask[:, None, None, :]
