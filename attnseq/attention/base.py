"""The interface shared by the RNN attention mechanisms.

Every mechanism is pure: `forward(query, keys, values, mask) -> (context, weights)` and nothing is
cached on the module. Mechanisms that transform the keys (e.g. additive: W_h h_j) do it in
`prepare_keys`, which a decoder may call once per batch and pass back as `prepared_keys` at every
step, so the key projection is not recomputed T times (the state lives with the caller).

Shapes: B batch, T query (target) positions, S key (source) positions.
"""

import abc

import torch
from torch import Tensor, nn

from attnseq.attention.masks import masked_softmax


class Attention(nn.Module, metaclass=abc.ABCMeta):
    """Base class: subclasses implement `scores` and optionally `prepare_keys`."""

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """Per-batch transform of the keys (B, S, Dk) -> (B, S, *); identity by default."""
        return keys

    @abc.abstractmethod
    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """Energies e (B, T, S) for queries (B, T, Dq) against prepared keys."""

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        mask: Tensor | None = None,
        prepared_keys: Tensor | None = None,
        query_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Attend from each query over the keys and average the values.

        Args:
            query: (B, T, Dq) decoder states.
            keys: (B, S, Dk) encoder states.
            values: (B, S, Dv) usually the same tensor as keys.
            mask: bool (B, S) or (B, T, S), True where attention is allowed.
            prepared_keys: `self.prepare_keys(keys)`, if the caller computed it already.
            query_positions: (T,) or (B, T) target positions; used by local attention only.

        Returns:
            context (B, T, Dv) and weights (B, T, S); masked weights are exactly 0.
        """
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(keys)
        energies = self.scores(query, prepared_keys)  # (B, T, S)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (B, 1, S): same source mask for every query
        weights = masked_softmax(energies, mask)  # (B, T, S)
        context = torch.bmm(weights, values)  # (B, T, Dv)
        return context, weights
