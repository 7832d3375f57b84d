"""Longformer self-attention (attnseq/attention/longformer.py): window plus global tokens against
the masked softmax over its pattern, and without global tokens the sliding window."""

import pytest
import torch
from mechanism_inputs import ATOL, band, lengths_mask, qkv

from attnseq.attention.full import explicit_attention
from attnseq.attention.longformer import LongformerSelfAttention
from attnseq.attention.sliding_window import SlidingWindowSelfAttention

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def test_longformer_weights_are_exactly_zero_outside_the_pattern() -> None:
    """Window |i - j| <= 2 plus global positions 0..2 that see and are seen by all."""
    q, k, v = qkv()
    mask = lengths_mask()
    context, weights = LongformerSelfAttention(window=2, global_tokens=3)(
        q, k, v, mask, need_weights=True
    )
    i = torch.arange(40)
    pattern = band(40, 2, causal=False) | (i[None, :] < 3) | (i[:, None] < 3)
    assert 0.1 < pattern.float().mean() < 0.3
    allowed = pattern & mask[:, None, None, :]
    assert torch.all(weights.masked_select(~allowed) == 0)
    assert torch.all(weights.masked_select(allowed.expand_as(weights)) > 0)
    expected, expected_weights = explicit_attention(q, k, v, allowed)
    torch.testing.assert_close(context, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    fast, none = LongformerSelfAttention(window=2, global_tokens=3)(q, k, v, mask)
    assert none is None
    torch.testing.assert_close(fast, context, atol=ATOL, rtol=0)


def test_longformer_without_global_tokens_is_local() -> None:
    q, k, v = qkv()
    mask = lengths_mask()
    longformer = LongformerSelfAttention(window=4, global_tokens=0)(q, k, v, mask)[0]
    local = SlidingWindowSelfAttention(4)(q, k, v, mask)[0]
    torch.testing.assert_close(longformer, local, atol=ATOL, rtol=0)
