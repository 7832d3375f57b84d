"""Bahdanau's additive score and its coverage form (See et al. 2017), each class with its
formula.

Shapes: B batch, T query (target) positions, S source positions, A the score's hidden size.
"""

from torch import Tensor, nn

from attnseq.attention.base import AlignInputs, ScoreWrapper
from attnseq.attention.luong import TanhScore
from attnseq.attention.masks import masked_softmax


class AdditiveAttention(TanhScore):
    """Additive attention (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly
    Learning to Align and Translate", ICLR; eq. 6 and appendix A.1.2), without a bias:

        e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j),   a_ij = softmax_j(e_ij),   c_i = sum_j a_ij h_j

    W_a is `query_proj`, U_a `key_proj` (once per batch, `prepare_keys`), v_a `energy`: the
    computation of Luong's concat score (`TanhScore`).

    Args:
        query_dim: size of the decoder state s.
        key_dim: size of the encoder annotation h.
        attn_dim: size of the hidden layer inside the score (Bahdanau's n').
    """


class CoverageAttention(ScoreWrapper):
    """Coverage-aware attention around an additive or concat score (See, Liu & Manning 2017,
    "Get To The Point: Summarization with Pointer-Generator Networks", ACL; section 2.3, eq. 11;
    after Tu et al. 2016, "Modeling Coverage for Neural Machine Translation"):

        e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t),   a^t = softmax(e^t)

    with the coverage c^t = sum_{t' < t} a^{t'}, which the caller carries in its decoder state,
    and without eq. 11's b_attn (Bahdanau's eq. 6 has no bias either).

    Args:
        content: the additive or concat score whose W_q, W_k and v are used.

    Raises:
        TypeError: for any other score (it has no tanh layer to add w_c c_i to).
    """

    content: TanhScore

    def __init__(self, content: TanhScore) -> None:
        if not isinstance(content, TanhScore):
            raise TypeError(
                f"coverage needs an additive or concat score, got {type(content).__name__}"
            )
        super().__init__(content)
        attn_dim = content.energy.in_features
        self.coverage_proj = nn.Linear(1, attn_dim, bias=False)  # w_c

    def coverage_scores(self, query: Tensor, prepared_keys: Tensor, coverage: Tensor) -> Tensor:
        """e (B, T, S) for queries (B, T, Dq), prepared keys (B, S, A) and coverage (B, T, S)."""
        coverage_term = self.coverage_proj(coverage.unsqueeze(-1))  # w_c c_i: (B, T, S, A)
        return self.content.tanh_scores(query, prepared_keys, coverage_term)

    def align(self, inputs: AlignInputs) -> Tensor:
        """`Attention.align` with the coverage vector in the score (eq. 11): c^t is
        `inputs.coverage`, (B, T, S) or (B, S) (the same for every query); None = zeros."""
        query, keys, coverage = inputs.query, inputs.keys, inputs.coverage
        if coverage is None:
            return masked_softmax(self.scores(query, keys), inputs.mask)  # (B, T, S)
        if coverage.dim() == 2:
            coverage = coverage.unsqueeze(1).expand(-1, query.size(1), -1)  # (B, T, S)
        return masked_softmax(self.coverage_scores(query, keys, coverage), inputs.mask)
