"""Strided and fixed sparse attention (attnseq/attention/strided.py): Child et al.'s patterns by
hand, weights exactly zero outside them, the fused path equal to the explicit one."""

import pytest
import torch
from mechanism_inputs import ATOL, D_K, HEADS, OPTIONS, lengths_mask, qkv

from attnseq.attention.efficient import build_mechanism
from attnseq.attention.strided import sparse_pattern

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def test_sparse_patterns_golden() -> None:
    """Child et al. 2019 section 4.2 with l = 3 at position 7 of 10."""
    positions = torch.arange(10)

    def row(pattern: str, causal: bool, summary: int = 1) -> list[int]:
        mask = sparse_pattern(positions[7:8], positions, 3, pattern, summary, causal)[0]
        return positions[mask].tolist()

    # strided: |7 - j| <= 3, or 7 - j a multiple of 3
    assert row("strided", causal=True) == [1, 4, 5, 6, 7]
    assert row("strided", causal=False) == [1, 4, 5, 6, 7, 8, 9]
    # fixed: block {6, 7, 8}, or j mod 3 = 2 (the last cell of each block)
    assert row("fixed", causal=True) == [2, 5, 6, 7]
    assert row("fixed", causal=False) == [2, 5, 6, 7, 8]
    assert row("fixed", causal=False, summary=2) == [1, 2, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("name", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True])
def test_strided_weights_are_exactly_zero_outside_the_pattern(name: str, causal: bool) -> None:
    options = OPTIONS[name]
    mechanism = build_mechanism(options, D_K)
    q, k, v = qkv()
    mask = lengths_mask()
    positions = torch.arange(40)
    pattern = sparse_pattern(
        positions, positions, options.stride, options.pattern.value, options.summary, causal
    )
    assert 0.1 < pattern.float().mean() < 0.6  # really sparse, not trivially full or empty
    context, weights = mechanism(q, k, v, mask, causal=causal, need_weights=True)
    allowed = pattern & mask[:, None, None, :]  # (B, 1, T, S)
    assert torch.all(weights.masked_select(~allowed) == 0)
    assert torch.all(weights.masked_select(allowed.expand_as(weights)) > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 40))
    fast, _ = mechanism(q, k, v, mask, causal=causal)  # fused SDPA path
    torch.testing.assert_close(fast, context, atol=ATOL, rtol=0)
