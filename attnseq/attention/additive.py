"""Additive attention (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly
Learning to Align and Translate", ICLR; eq. 6 and appendix A.1.2):

    e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)
    a_ij = softmax_j(e_ij),   c_i = sum_j a_ij h_j

W_a: query projection, U_a: key projection (computed once per batch in `prepare_keys`).

Coverage-aware additive attention (See, Liu & Manning 2017, "Get To The Point: Summarization
with Pointer-Generator Networks", ACL; section 2.3, eq. 11; after Tu et al. 2016, "Modeling
Coverage for Neural Machine Translation"):

    e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t)
    a^t = softmax(e^t)

c^t = sum_{t' < t} a^{t'} is the coverage vector: how much attention source position i has
received so far. Feeding it to the score lets the model see what it already attended to (and,
with the coverage loss of attnseq/models/pointer_generator.py, learn not to attend there again).

The content score is an additive (Bahdanau) or concat (Luong) score: both are
v^T tanh(W_q s + W_k h) (`AdditiveAttention` here, `ConcatAttention` in luong.py), so the
coverage term w_c c_i enters the same tanh. Our additive score has no b_attn (nor does
Bahdanau's eq. 6); the coverage term adds none either. The module stays pure: the caller
carries c^t in its decoder state and passes it in.

Shapes: B batch, T query (target) positions, S source positions, A the score's hidden size.
"""

import torch
from torch import Tensor, nn

from attnseq.attention.base import AlignInputs, Attention, ScoreWrapper
from attnseq.attention.luong import ConcatAttention
from attnseq.attention.masks import masked_softmax


class AdditiveAttention(Attention):
    """score(s, h) = v^T tanh(W_q s + W_k h).

    Args:
        query_dim: size of the decoder state s.
        key_dim: size of the encoder annotation h.
        attn_dim: size of the hidden layer inside the score (Bahdanau's n').
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W_a
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)  # U_a
        self.energy = nn.Linear(attn_dim, 1, bias=False)  # v_a

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # (B, S, A)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        q = self.query_proj(query)  # (B, T, A)
        hidden = torch.tanh(q.unsqueeze(2) + prepared_keys.unsqueeze(1))  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)


class CoverageAttention(ScoreWrapper):
    """score(s, h_i, c_i) = v^T tanh(W_q s + W_k h_i + w_c c_i) around an additive/concat score.

    Args:
        content: the additive or concat score whose W_q, W_k and v are used.

    Raises:
        TypeError: for any other score (it has no tanh layer to add w_c c_i to).
    """

    content: AdditiveAttention | ConcatAttention

    def __init__(self, content: AdditiveAttention | ConcatAttention) -> None:
        if not isinstance(content, (AdditiveAttention, ConcatAttention)):
            raise TypeError(
                f"coverage needs an additive or concat score, got {type(content).__name__}"
            )
        super().__init__(content)
        attn_dim = content.energy.in_features
        self.coverage_proj = nn.Linear(1, attn_dim, bias=False)  # w_c

    def coverage_scores(self, query: Tensor, prepared_keys: Tensor, coverage: Tensor) -> Tensor:
        """e (B, T, S) for queries (B, T, Dq), prepared keys (B, S, A) and coverage (B, T, S)."""
        q = self.content.query_proj(query)  # (B, T, A)
        hidden = q.unsqueeze(2) + prepared_keys.unsqueeze(1)  # (B, T, S, A)
        hidden = hidden + self.coverage_proj(coverage.unsqueeze(-1))  # + w_c c_i
        return self.content.energy(torch.tanh(hidden)).squeeze(-1)  # (B, T, S)

    def align(self, inputs: AlignInputs) -> Tensor:
        """`Attention.align` with the coverage vector in the score (eq. 11): c^t is
        `inputs.coverage`, (B, T, S) or (B, S) (the same for every query); None = zeros."""
        query, keys, coverage = inputs.query, inputs.keys, inputs.coverage
        if coverage is None:
            return masked_softmax(self.scores(query, keys), inputs.mask)  # (B, T, S)
        if coverage.dim() == 2:
            coverage = coverage.unsqueeze(1).expand(-1, query.size(1), -1)  # (B, T, S)
        return masked_softmax(self.coverage_scores(query, keys, coverage), inputs.mask)
