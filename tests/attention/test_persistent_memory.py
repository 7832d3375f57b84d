"""Persistent memory in multi-head attention (Sukhbaatar et al. 2019): the formula written out by
hand, fast and explicit paths equal, memory columns outside the padding and causal masks,
cached decoding equal to the causal forward pass, and cross-attention weights over the source."""

import math

import pytest
import torch

from attnseq.attention.efficient import build_self_attention
from attnseq.attention.masks import padding_mask
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.config.choices import AttentionKind
from attnseq.config.schema import AttentionConfig

D_MODEL, HEADS, SLOTS = 16, 2, 3
D_K = D_MODEL // HEADS
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def make(**options: object) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(D_MODEL, HEADS, memory_slots=SLOTS, **options).eval()  # type: ignore[arg-type]


def test_memory_is_softmax_over_the_slots_then_the_sequence() -> None:
    module = make()
    x = torch.randn(2, 5, D_MODEL)
    mask = padding_mask(torch.tensor([5, 3]), 5)
    out, weights = module(x, x, x, mask, need_weights=True)

    def heads(t: torch.Tensor) -> torch.Tensor:  # (B, N, d) -> (B, H, N, d_k)
        return t.view(2, -1, HEADS, D_K).transpose(1, 2)

    memory_k = module.memory.keys.expand(2, -1, -1, -1)  # (B, H, N, d_k)
    memory_v = module.memory.values.expand(2, -1, -1, -1)
    keys = torch.cat([memory_k, heads(module.k_proj(x))], dim=2)  # (B, H, N + S, d_k)
    values = torch.cat([memory_v, heads(module.v_proj(x))], dim=2)
    scores = heads(module.q_proj(x)) @ keys.transpose(-2, -1) / math.sqrt(D_K)
    allowed = torch.cat([torch.ones(2, SLOTS, dtype=torch.bool), mask], dim=1)
    scores = scores.masked_fill(~allowed[:, None, None, :], float("-inf"))
    expected_weights = torch.softmax(scores, dim=-1)  # (B, H, T, N + S)
    context = (expected_weights @ values).transpose(1, 2).reshape(2, 5, D_MODEL)
    torch.testing.assert_close(out, module.out_proj(context), atol=ATOL, rtol=0)
    # returned as (B, H, T, S + N): the sequence's columns, then the memory's
    assert weights.shape == (2, HEADS, 5, 5 + SLOTS)
    reordered = torch.cat([expected_weights[..., SLOTS:], expected_weights[..., :SLOTS]], -1)
    torch.testing.assert_close(weights, reordered, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 5))
    assert torch.all(weights[1, :, :, 3:5] == 0)  # padded keys: exactly zero
    assert torch.all(weights[..., 5:] > 0)  # memory columns are never masked


@pytest.mark.parametrize("causal", [False, True])
def test_fast_and_explicit_paths_agree(causal: bool) -> None:
    module = make()
    x = torch.randn(2, 7, D_MODEL)
    mask = None if causal else padding_mask(torch.tensor([7, 2]), 7)
    fast, none = module(x, x, x, mask, is_causal=causal)
    explicit, weights = module(x, x, x, mask, is_causal=causal, need_weights=True)
    assert none is None
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    if causal:  # future positions are zero, every memory slot is seen from the first query
        assert torch.all(weights[..., :7].triu(diagonal=1) == 0)
        assert torch.all(weights[:, :, 0, 7:] > 0)


def test_an_empty_row_attends_to_the_memory_only() -> None:
    module = make()
    x = torch.randn(1, 4, D_MODEL)
    _, weights = module(x, x, x, torch.zeros(1, 4, dtype=torch.bool), need_weights=True)
    assert torch.all(weights[..., :4] == 0)
    torch.testing.assert_close(weights[..., 4:].sum(-1), torch.ones(1, HEADS, 4))


def test_cached_decoding_equals_the_causal_forward() -> None:
    module = make()
    x = torch.randn(2, 9, D_MODEL)
    expected, expected_weights = module(x, x, x, is_causal=True, need_weights=True)
    cache = module.empty_cache(2, x)
    outputs = []
    for t in range(9):
        out, weights, cache = module.attend_cached(x[:, t : t + 1], cache, need_weights=True)
        outputs.append(out)
        assert weights.shape == (2, HEADS, 1, t + 1 + SLOTS)
        torch.testing.assert_close(weights[:, :, 0, -SLOTS:], expected_weights[:, :, t, -SLOTS:])
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected, atol=ATOL, rtol=0)
    assert cache["self_k"].shape == (2, HEADS, 9, D_K)  # the cache holds positions only


def test_cross_attention_weights_stay_over_the_source() -> None:
    module = make(memory_in_weights=False)
    query, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 6, D_MODEL)
    _, weights = module(
        query, memory, memory, padding_mask(torch.tensor([6, 4]), 6), need_weights=True
    )
    assert weights.shape == (2, HEADS, 3, 6)
    sums = weights.sum(-1)
    assert torch.all(sums < 1) and torch.all(sums > 0)  # the rest went to the memory slots


def test_memory_needs_full_attention() -> None:
    options = AttentionConfig(kind=AttentionKind.local, D=2)
    with pytest.raises(ValueError, match="persistent memory needs full attention"):
        build_self_attention(options, D_MODEL, HEADS, memory_slots=2)
    plain = build_self_attention(None, D_MODEL, HEADS, memory_slots=0)
    assert plain.memory is None
    assert (
        sum(p.numel() for p in make().parameters())
        == sum(p.numel() for p in plain.parameters()) + 2 * HEADS * SLOTS * D_K
    )
