"""The decoding settings' functions (attnseq/decoding/settings.py): GNMT's length penalty of one
length and of many, and which settings decode greedily."""

import pytest
import torch
from helpers import lp_by_hand

from attnseq.decoding import DecodingConfig, gnmt_length_penalty
from attnseq.decoding.settings import check, is_greedy


def test_gnmt_length_penalty_of_one_length_and_of_many() -> None:
    lengths = [0, 1, 4, 9]
    many = gnmt_length_penalty(torch.tensor(lengths), 0.6).tolist()
    assert [gnmt_length_penalty(n, 0.6) for n in lengths] == pytest.approx(many, rel=1e-6)
    assert gnmt_length_penalty(4, 0.6) == pytest.approx(lp_by_hand(4, 0.6), rel=1e-12)
    assert gnmt_length_penalty(4, 0.6, offset=0.0) == pytest.approx(4**0.6, rel=1e-12)


def test_coverage_penalty_is_not_greedy() -> None:
    assert is_greedy(DecodingConfig(beam=1))
    assert not is_greedy(DecodingConfig(beam=1, coverage_penalty=0.2))
    with pytest.raises(ValueError, match="coverage_penalty must be >= 0, got -1.0"):
        check(DecodingConfig(coverage_penalty=-1.0))
