"""Sliding-window self-attention (attnseq/attention/sliding_window.py): full attention when the
window covers the sequence, and the blocked computation against a masked softmax over the band."""

import pytest
import torch
from mechanism_inputs import ATOL, D_MODEL, HEADS, band, lengths_mask, qkv

from attnseq.attention.full import explicit_attention
from attnseq.attention.masks import padding_mask
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.attention.sliding_window import SlidingWindowSelfAttention

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.mark.parametrize("causal", [False, True])
def test_local_with_a_window_over_the_whole_sequence_equals_full_attention(causal: bool) -> None:
    torch.manual_seed(0)
    full = MultiHeadAttention(D_MODEL, HEADS).eval()
    local = MultiHeadAttention(D_MODEL, HEADS, mechanism=SlidingWindowSelfAttention(40)).eval()
    local.load_state_dict(full.state_dict())
    x = torch.randn(2, 40, D_MODEL)
    mask = None if causal else lengths_mask()
    expected, expected_weights = full(x, x, x, mask, is_causal=causal, need_weights=True)
    for need_weights in (False, True):
        out, weights = local(x, x, x, mask, is_causal=causal, need_weights=need_weights)
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
        if need_weights:
            torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "window"), [(40, 3), (100, 40), (7, 1), (1, 2)])
def test_local_is_softmax_over_the_band(length: int, window: int, causal: bool) -> None:
    """Blocked computation (several blocks for 100/40) == masked softmax over |i-j| <= w."""
    q, k, v = qkv(length)
    mask = padding_mask(torch.tensor([length, max(1, length - 9)]), length)
    allowed = band(length, window, causal) & mask[:, None, None, :]
    expected, expected_weights = explicit_attention(q, k, v, allowed)
    context, weights = SlidingWindowSelfAttention(window)(
        q, k, v, mask, causal=causal, need_weights=True
    )
    torch.testing.assert_close(context, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    assert torch.all(weights[..., ~band(length, window, causal)] == 0)
