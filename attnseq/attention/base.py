"""The interface of the RNN attention mechanisms: `forward(query, keys, values, mask) ->
(context, weights)`, pure and written once here; a mechanism fills the hooks `scores`, and
where it needs them `align` and `prepare_keys`.

Shapes: B batch, T query (target) positions, S key (source) positions.
"""

import abc
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnseq.attention.masks import masked_softmax


@dataclass(frozen=True)
class AlignInputs:
    """What one attention call scores.

    query: (B, T, Dq) decoder states.
    keys: (B, S, *) the keys after `Attention.prepare_keys`.
    mask: bool (B, 1, S) or (B, T, S), True where attention is allowed, or None.
    query_positions: (T,) or (B, T) target positions, or None; used by local attention only.
    coverage: (B, S) or (B, T, S) attention received so far, or None; used by coverage only.
    """

    query: Tensor
    keys: Tensor
    mask: Tensor | None = None
    query_positions: Tensor | None = None
    coverage: Tensor | None = None


class Attention(nn.Module, metaclass=abc.ABCMeta):
    """Base class: subclasses implement `scores` and optionally `prepare_keys` and `align`."""

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """Per-batch transform of the keys (B, S, Dk) -> (B, S, *); identity by default. A
        decoder calls it once and passes the result as `prepared_keys` at every step."""
        return keys

    @abc.abstractmethod
    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """Energies e (B, T, S) for queries (B, T, Dq) against prepared keys."""

    def align(self, inputs: AlignInputs) -> Tensor:
        """Weights a (B, T, S) = softmax_j(e_ij) over the allowed positions, exactly 0 elsewhere."""
        return masked_softmax(self.scores(inputs.query, inputs.keys), inputs.mask)  # (B, T, S)

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        prepared_keys: Tensor | None = None,
        query_positions: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query over the keys and average the values: c_i = sum_j a_ij v_j.

        Args:
            query: (B, T, Dq) decoder states.
            keys: (B, S, Dk) encoder states.
            values: (B, S, Dv) usually the same tensor as keys.
            mask: bool (B, S) or (B, T, S), True where attention is allowed.
            prepared_keys: `self.prepare_keys(keys)`, if the caller computed it already.
            query_positions: (T,) or (B, T) target positions; used by local attention only.
            coverage: (B, S) or (B, T, S) attention received so far; used by coverage
                attention only.

        Returns:
            context (B, T, Dv) and weights (B, T, S); masked weights are exactly 0.
        """
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(keys)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (B, 1, S): same source mask for every query
        inputs = AlignInputs(query, prepared_keys, mask, query_positions, coverage)
        weights = self.align(inputs)  # (B, T, S)
        context = torch.bmm(weights, values)  # (B, T, Dv)
        return context, weights


class ScoreWrapper(Attention):
    """A mechanism built around a content score: the wrapped module's `prepare_keys` and
    `scores` are used, its own `forward` is not.

    Args:
        content: the content score module.
    """

    def __init__(self, content: Attention) -> None:
        super().__init__()
        self.content = content

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """Whatever the content score precomputes from keys (B, S, Dk)."""
        return self.content.prepare_keys(keys)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """The content energies (B, T, S)."""
        return self.content.scores(query, prepared_keys)
