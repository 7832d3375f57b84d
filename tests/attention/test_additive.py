"""Bahdanau's additive score and its coverage form (attnseq/attention/additive.py): the same
computation as Luong's concat score, and the coverage vector's shapes. The formula itself, pair
by pair, is tests/attention/test_scores.py's for every score; coverage inside the tanh is
tests/models/test_pointer_generator.py's."""

import torch

from attnseq.attention import AdditiveAttention, ConcatAttention, padding_mask
from attnseq.attention.additive import CoverageAttention


def test_additive_and_concat_are_one_score() -> None:
    """With the same W_q, W_k and v the two give the same energies and weights, bit for bit."""
    torch.manual_seed(0)
    additive = AdditiveAttention(5, 3, 6)
    concat = ConcatAttention(5, 3, 6)
    concat.load_state_dict(additive.state_dict())
    query, keys = torch.randn(2, 4, 5), torch.randn(2, 7, 3)
    mask = padding_mask(torch.tensor([7, 4]), 7)
    energies = additive.scores(query, additive.prepare_keys(keys))
    assert torch.equal(energies, concat.scores(query, concat.prepare_keys(keys)))
    assert torch.equal(additive(query, keys, keys, mask)[1], concat(query, keys, keys, mask)[1])


def test_one_coverage_row_serves_every_query_and_none_is_zero_coverage() -> None:
    torch.manual_seed(0)
    attention = CoverageAttention(AdditiveAttention(5, 3, 6))
    query, keys = torch.randn(2, 4, 5), torch.randn(2, 7, 3)
    mask = padding_mask(torch.tensor([7, 4]), 7)
    coverage = torch.rand(2, 7)  # (B, S): the same for the 4 queries
    _, per_source = attention(query, keys, keys, mask, coverage=coverage)
    expanded = coverage[:, None, :].expand(-1, 4, -1).contiguous()  # (B, T, S)
    _, per_query = attention(query, keys, keys, mask, coverage=expanded)
    assert torch.equal(per_source, per_query)
    _, without = attention(query, keys, keys, mask)
    _, zeros = attention(query, keys, keys, mask, coverage=torch.zeros(2, 7))
    assert torch.equal(without, zeros)
    assert torch.all(without[1, :, 4:] == 0)
