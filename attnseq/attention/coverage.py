"""Coverage-aware additive attention (See, Liu & Manning 2017, "Get To The Point: Summarization
with Pointer-Generator Networks", ACL; section 2.3, eq. 11; after Tu et al. 2016, "Modeling
Coverage for Neural Machine Translation"):

    e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t)
    a^t = softmax(e^t)

c^t = sum_{t' < t} a^{t'} is the coverage vector: how much attention source position i has
received so far. Feeding it to the score lets the model see what it already attended to (and,
with the coverage loss of attnseq/models/copy.py, learn not to attend there again).

The content score is an additive (Bahdanau) or concat (Luong) score: both are
v^T tanh(W_q s + W_k h) (attnseq/attention/additive.py, multiplicative.py), so the coverage term
w_c c_i enters the same tanh. Our additive score has no b_attn (nor does Bahdanau's eq. 6); the
coverage term adds none either. The module stays pure: the caller carries c^t in its decoder
state and passes it in.

Shapes: B batch, T query (target) positions, S source positions, A the score's hidden size.
"""

import torch
from torch import Tensor, nn

from attnseq.attention.additive import AdditiveAttention
from attnseq.attention.base import Attention
from attnseq.attention.masks import masked_softmax
from attnseq.attention.multiplicative import ConcatAttention


class CoverageAttention(Attention):
    """score(s, h_i, c_i) = v^T tanh(W_q s + W_k h_i + w_c c_i) around an additive/concat score.

    Args:
        content: the additive or concat score whose W_q, W_k and v are used.

    Raises:
        TypeError: for any other score (it has no tanh layer to add w_c c_i to).
    """

    def __init__(self, content: AdditiveAttention | ConcatAttention) -> None:
        super().__init__()
        if not isinstance(content, (AdditiveAttention, ConcatAttention)):
            raise TypeError(
                f"coverage needs an additive or concat score, got {type(content).__name__}"
            )
        self.content = content
        attn_dim = content.energy.in_features
        self.coverage_proj = nn.Linear(1, attn_dim, bias=False)  # w_c

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """W_k h once per batch: (B, S, Dk) -> (B, S, A)."""
        return self.content.prepare_keys(keys)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """Energies without coverage (c = 0), (B, T, S)."""
        return self.content.scores(query, prepared_keys)

    def coverage_scores(self, query: Tensor, prepared_keys: Tensor, coverage: Tensor) -> Tensor:
        """e (B, T, S) for queries (B, T, Dq), prepared keys (B, S, A) and coverage (B, T, S)."""
        q = self.content.query_proj(query)  # (B, T, A)
        hidden = q.unsqueeze(2) + prepared_keys.unsqueeze(1)  # (B, T, S, A)
        hidden = hidden + self.coverage_proj(coverage.unsqueeze(-1))  # + w_c c_i
        return self.content.energy(torch.tanh(hidden)).squeeze(-1)  # (B, T, S)

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
        """`Attention.forward` with the coverage vector in the score.

        Args:
            query, keys, values, mask, prepared_keys, query_positions: as in
                `Attention.forward` (query_positions is unused: the score is global).
            coverage: (B, T, S) or (B, S) (the same for every query) c^t; None = zeros.

        Returns:
            context (B, T, Dv) and weights (B, T, S); masked weights are exactly 0.
        """
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(keys)
        if coverage is None:
            energies = self.content.scores(query, prepared_keys)  # (B, T, S)
        else:
            if coverage.dim() == 2:
                coverage = coverage.unsqueeze(1).expand(-1, query.size(1), -1)  # (B, T, S)
            energies = self.coverage_scores(query, prepared_keys, coverage)
        if mask is not None and mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (B, 1, S)
        weights = masked_softmax(energies, mask)  # (B, T, S)
        return torch.bmm(weights, values), weights  # (B, T, Dv), (B, T, S)
