"""The interface of the transformer's attention functions ("mechanisms"): per-head q, k, v in,
per-head context out. A mechanism fills `attend`; `forward` checks each call once for all of
them; `empty_cache` and `step` decode incrementally (causal mechanisms only).

Shapes: B batch, H heads, T query positions, S key positions, N new positions, P cached
positions, d_k head size.
"""

import abc
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

SelfCache = dict[str, Tensor]  # one decoder layer's self-attention state, batch-first tensors
KeyValue = tuple[Tensor, Tensor]  # per-head keys and values, each (B, H, S, d_k)


@dataclass(frozen=True)
class Heads:
    """The per-head inputs of one attention call.

    q: (B, H, T, d_k) queries, already projected and split into heads.
    k: (B, H, S, d_k) keys.
    v: (B, H, S, d_k) values.
    mask: bool, True = allowed: the key padding mask (B, S), or for full attention anything
        `as_attention_mask` takes; None = no mask.
    causal: forbid each query to see later keys; the T queries are the last T of the S
        positions (bottom-right aligned).
    dropout: dropout probability on the attention weights (0 outside training).
    """

    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor | None = None
    causal: bool = False
    dropout: float = 0.0


def append_positions(past: KeyValue, k: Tensor, v: Tensor) -> KeyValue:
    """Cached keys and values (B, H, P, d_k) each, followed by N new ones: (B, H, P + N, d_k)."""
    return torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)


class AttentionMechanism(nn.Module, metaclass=abc.ABCMeta):
    """An attention function over per-head q, k, v; subclasses fill `attend` and say what they
    support.

    kind: the config name, `model.attention.kind`.
    supports_causal: can be used for decoder (causal) self-attention, with `step`.
    has_weights: can return explicit weights (B, H, T, S); kernel methods cannot.
    self_attention_only: needs T == S and takes only a (B, S) key padding mask.
    """

    kind: ClassVar[str] = ""
    supports_causal: ClassVar[bool] = True
    has_weights: ClassVar[bool] = True
    self_attention_only: ClassVar[bool] = True

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        *,
        causal: bool = False,
        need_weights: bool = False,
        dropout: float = 0.0,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend every query to the keys the mechanism allows.

        Args:
            q, k, v, mask, causal, dropout: as in `Heads`.
            need_weights: also return the weights (B, H, T, S).

        Returns:
            context (B, H, T, d_k) and weights (B, H, T, S) or None.

        Raises:
            ValueError: for a causal use or weights the mechanism cannot give, or, for a
                self-attention mechanism, a mask that is not (B, S) or T != S.
        """
        self.check(causal, need_weights)
        if self.self_attention_only:
            self.check_self_attention(q.size(2), k.size(2), mask)
        return self.attend(Heads(q, k, v, mask, causal, dropout), need_weights)

    @abc.abstractmethod
    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Context (B, H, T, d_k) and, with need_weights, the weights (B, H, T, S)."""

    def empty_cache(self, batch: int, heads: int, d_k: int, like: Tensor) -> SelfCache:
        """The decoding state before the first step, dtype/device of `like`: empty keys and
        values {"self_k", "self_v"}, each (B, H, 0, d_k)."""
        self.check(causal=True, need_weights=False)  # kinds without causal use end here
        empty = like.new_zeros(batch, heads, 0, d_k)
        return {"self_k": empty, "self_v": empty}

    def step(
        self, new: Heads, cache: SelfCache, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, SelfCache]:
        """Causal attention from N new positions over everything so far: by default the cache
        holds every key and value; mechanisms that keep less (a window, running sums) override
        this and `empty_cache`. Caches are dicts of batch-first tensors, so that beam search
        can select rows in them.

        Args:
            new: q, k, v of the new positions, each (B, H, N, d_k), and the dropout.
            cache: from `empty_cache` or the previous `step` (not modified).
            need_weights: also return the weights over the positions attended to, if the
                mechanism keeps them.

        Returns:
            context (B, H, N, d_k), weights (B, H, N, P + N) or None, and the new cache.
        """
        self.check(causal=True, need_weights=False)
        keys, values = append_positions((cache["self_k"], cache["self_v"]), new.k, new.v)
        context, weights = self.attend(
            Heads(new.q, keys, values, causal=True, dropout=new.dropout), need_weights
        )
        return context, weights, {"self_k": keys, "self_v": values}

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

    def check_self_attention(self, queries: int, keys: int, mask: Tensor | None) -> None:
        """Reject a mask other than (B, S) and T != S, which self-attention kinds cannot take."""
        if mask is not None and mask.dim() != 2:
            raise ValueError(
                f"attention kind={self.kind} takes a (B, S) key padding mask, got "
                f"shape {tuple(mask.shape)}"
            )
        if queries != keys:
            raise ValueError(
                f"attention kind={self.kind} is self-attention: needs as many "
                f"queries as keys, got {queries} and {keys}"
            )
