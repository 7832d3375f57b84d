"""The coverage penalty of beam search (Wu et al. 2016, "Google's Neural Machine Translation
System", eq. 14): finished hypotheses are ranked by

    s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y),    cp(X; Y) = beta sum_i log(min(sum_j p_ij, 1.0))

with p_ij the attention of output position j on source position i, summed over the hypothesis's
scored positions (EOS included), and i over the real source positions. cp <= 0 rewards outputs
that have attended to every source position at least once (beta = 0 turns it off). An attention
that is exactly zero counts as the smallest normal float, so the logarithm stays finite.

Which attention: an RNN's; a transformer's last layer averaged over heads (the map the alignment
tools use too).

`BeamCoverage` carries sum_j p_ij for every live row of a beam search (R, S), reordered with the
beams; attnseq/decoding/beam_search.py uses it.

Shapes: R live rows (hypotheses), S source length, L layers, H heads.
"""

import torch
from torch import Tensor


def gnmt_coverage_penalty(coverage: Tensor, src_mask: Tensor, beta: float) -> Tensor:
    """cp(X; Y) = beta sum_i log(min(sum_j p_ij, 1.0)) (Wu et al. 2016, eq. 14).

    Args:
        coverage: (..., S) attention summed over the output positions, sum_j p_ij.
        src_mask: (..., S) bool, True at real source positions (padding adds nothing).

    Returns:
        (...) the penalty, <= 0.
    """
    covered = coverage.float().clamp(min=torch.finfo(torch.float32).tiny, max=1.0)
    return beta * (torch.log(covered) * src_mask).sum(dim=-1)


def source_attention(attention: Tensor) -> Tensor:
    """One distribution over the source per row: RNN (R, S) as is, transformer (R, L, H, S) ->
    the last layer's head average (R, S)."""
    return attention if attention.dim() == 2 else attention[:, -1].mean(dim=1)


class BeamCoverage:
    """sum_j p_ij of every live row of a beam search, for the coverage penalty.

    Args:
        src_lengths: (B,) real source lengths of the first step's rows.
        src_len: S, the padded source length.
        beta: the penalty's weight.
    """

    def __init__(self, src_lengths: Tensor, src_len: int, beta: float) -> None:
        device = src_lengths.device
        self.beta = beta
        self.src_mask = torch.arange(src_len, device=device) < src_lengths[:, None]  # (R, S)
        self.coverage = torch.zeros(self.src_mask.shape, device=device)  # (R, S)

    def add(self, attention: Tensor | None) -> None:
        """Add one step's attention of every row, (R, S) or (R, L, H, S)."""
        if attention is None:
            raise ValueError("the coverage penalty needs a model with attention")
        self.coverage = self.coverage + source_attention(attention).float()

    def penalty(self, rows: Tensor) -> Tensor:
        """cp of hypotheses that end on these rows (any shape of row indices) -> same shape."""
        return gnmt_coverage_penalty(self.coverage[rows], self.src_mask[rows], self.beta)

    def reorder(self, rows: Tensor) -> None:
        """Follow the beams: row r of the next step continues row rows[r]."""
        self.coverage, self.src_mask = self.coverage[rows], self.src_mask[rows]
