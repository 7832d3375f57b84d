"""Hierarchical attention's combined weights (attnseq/attention/hierarchical.py; Nallapati et al.
2016, section 2.4): they sum to one and factor into segment x word, a zero-weight segment
contributes nothing, and an empty row stays zero without NaN."""

import pytest
import torch

from attnseq.attention.hierarchical import combine_hierarchical


def test_weights_sum_to_one_and_factor_into_segment_times_word() -> None:
    alpha = torch.tensor([[[0.1, 0.2, 0.3, 0.4, 0.0]]])  # (1, 1, S): the last is padding
    beta = torch.tensor([[[0.25, 0.75]]])  # (1, 1, N)
    segments = torch.tensor([[0, 0, 1, 1, -1]])
    combined = combine_hierarchical(alpha, beta, segments)
    # by hand: alpha * beta_s = .025 .05 .225 .3, total .6
    expected = torch.tensor([[[0.025, 0.05, 0.225, 0.3, 0.0]]]) / 0.6
    torch.testing.assert_close(combined, expected)
    assert combined.sum().item() == pytest.approx(1.0)
    # P(j) = P(s(j)) * alpha_j / A_s(j), with P(s) = beta_s A_s / sum_r beta_r A_r
    mass = torch.stack([combined[..., :2].sum(-1), combined[..., 2:4].sum(-1)], dim=-1)  # (1, 1, N)
    area = torch.tensor([0.3, 0.7])
    torch.testing.assert_close(mass[0, 0], beta[0, 0] * area / (beta[0, 0] * area).sum())
    within = alpha[0, 0, :4] / area[segments[0, :4]]
    torch.testing.assert_close(combined[0, 0, :4], mass[0, 0, segments[0, :4]] * within)


def test_a_segment_with_zero_weight_contributes_nothing() -> None:
    alpha = torch.softmax(torch.randn(2, 3, 6), dim=-1)
    beta = torch.tensor([0.0, 0.6, 0.4]).expand(2, 3, 3)
    segments = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 2]])
    combined = combine_hierarchical(alpha, beta, segments)
    assert (combined.masked_select((segments == 0).unsqueeze(1).expand_as(combined)) == 0).all()
    torch.testing.assert_close(combined.sum(-1), torch.ones(2, 3))
    # one segment with all the weight: the word attention, unchanged
    one = combine_hierarchical(alpha, torch.ones(2, 3, 1), torch.zeros(2, 6, dtype=torch.long))
    torch.testing.assert_close(one, alpha)


def test_an_empty_row_stays_zero_without_nan() -> None:
    combined = combine_hierarchical(
        torch.zeros(1, 1, 3), torch.zeros(1, 1, 1), torch.zeros(1, 3).long()
    )
    assert torch.equal(combined, torch.zeros(1, 1, 3))
