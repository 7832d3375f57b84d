"""Full attention as one mechanism: its fused (SDPA) and explicit paths against each other and
against the formula, for every mask shape, causal alignments, and fully masked rows."""

import math

import pytest
import torch

from attnseq.attention.full import FullAttention, explicit_attention, fused_attention
from attnseq.attention.masks import bottom_right_causal_mask, padding_mask

B, H, T, S, D_K = 3, 2, 4, 6, 8
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def qkv(tgt_len: int = T, src_len: int = S) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, tgt_len, D_K, generator=generator)
    k = torch.randn(B, H, src_len, D_K, generator=generator)
    v = torch.randn(B, H, src_len, D_K, generator=generator)
    return q, k, v


MASKS = ("none", "padding", "per_query", "per_head")


def make_mask(name: str, tgt_len: int) -> torch.Tensor | None:
    """A mask of each shape full attention takes, with at least one fully masked row."""
    per_query = torch.rand(B, tgt_len, S, generator=torch.Generator().manual_seed(1)) > 0.4
    per_query[0, -1] = False  # one query of row 0 sees nothing
    per_head = torch.ones(B, H, tgt_len, S, dtype=torch.bool)
    per_head[1, 0] = False  # every query of head 0 of row 1 sees nothing
    return {
        "none": None,
        "padding": padding_mask(torch.tensor([S, 2, 0]), S),  # (B, S); row 2 is empty
        "per_query": per_query,  # (B, T, S)
        "per_head": per_head,  # (B, H, T, S)
    }[name]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tgt_len", [1, T, S])
@pytest.mark.parametrize("name", MASKS)
def test_fused_and_explicit_paths_are_equal(name: str, tgt_len: int, causal: bool) -> None:
    mask = make_mask(name, tgt_len)
    q, k, v = qkv(tgt_len)
    full = FullAttention()
    fused, none = full(q, k, v, mask, causal=causal)
    explicit, weights = full(q, k, v, mask, causal=causal, need_weights=True)
    assert none is None and weights is not None and weights.shape == (B, H, tgt_len, S)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fused, explicit, atol=ATOL, rtol=0)
    if causal:  # the queries are the last tgt_len positions: bottom-right aligned
        assert torch.all(weights[..., ~bottom_right_causal_mask(tgt_len, S)] == 0)


def test_fully_masked_rows_give_zero_context_and_zero_weights() -> None:
    q, k, v = qkv()
    mask = padding_mask(torch.tensor([S, 2, 0]), S)  # row 2: no key at all
    fused, _ = FullAttention()(q, k, v, mask)
    explicit, weights = FullAttention()(q, k, v, mask, need_weights=True)
    assert weights is not None
    for context in (fused, explicit):
        assert torch.equal(context[2], torch.zeros_like(context[2]))
    assert torch.all(weights[2] == 0) and torch.all(weights[1, ..., 2:] == 0)
    torch.testing.assert_close(weights[:2].sum(-1), torch.ones(2, H, T))


def test_explicit_path_is_the_formula() -> None:
    """softmax(q k^T / sqrt(d_k)) v, masked positions removed before the softmax."""
    q, k, v = qkv()
    mask = padding_mask(torch.tensor([S, 3, 1]), S)
    context, weights = explicit_attention(q, k, v, mask[:, None, None, :])
    scores = q @ k.transpose(-2, -1) / math.sqrt(D_K)
    expected = torch.softmax(scores.masked_fill(~mask[:, None, None, :], -math.inf), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, expected @ v)
    torch.testing.assert_close(fused_attention(q, k, v, mask[:, None, None, :]), expected @ v)


def test_square_causal_flag_equals_the_causal_mask() -> None:
    """SDPA's top-left causal flag (square, no mask) and an explicit lower-triangular mask."""
    q, k, v = qkv(S)
    flagged = fused_attention(q, k, v, None, is_causal=True)
    masked = fused_attention(q, k, v, bottom_right_causal_mask(S, S))
    torch.testing.assert_close(flagged, masked, atol=ATOL, rtol=0)


def test_full_attention_takes_cross_attention_shapes() -> None:
    """Unlike the self-attention kinds, full attention accepts T != S and per-query masks."""
    full = FullAttention()
    assert not full.self_attention_only and full.supports_causal and full.has_weights
    q, k, v = qkv(2, 5)
    context, weights = full(q, k, v, torch.ones(B, 2, 5, dtype=torch.bool), need_weights=True)
    assert context.shape == (B, H, 2, D_K) and weights is not None
    assert weights.shape == (B, H, 2, 5)
