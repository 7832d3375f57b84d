"""BigBird (Zaheer et al. 2020): the block pattern against its definition, weights exactly zero
outside it, the block-sparse path against the masked softmax, one fixed pattern per seed and
layer, and a causal form whose rows do not depend on the sequence's length."""

import pytest
import torch

from attnseq.attention.bigbird import BigBirdSelfAttention, bigbird_mask, block_pattern
from attnseq.attention.efficient import build_self_attention, for_layer
from attnseq.attention.full import explicit_attention
from attnseq.attention.masks import padding_mask
from attnseq.attention.mechanism import Heads
from attnseq.config.choices import AttentionKind
from attnseq.config.schema import AttentionConfig

HEADS, D_K, D_MODEL = 2, 8, 16
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def qkv(length: int, batch: int = 2, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, HEADS, length, D_K, generator=generator) for _ in range(3)]


def test_block_pattern_holds_window_globals_and_r_random_blocks() -> None:
    """Every non-global row: its 3-block window, block 0, and exactly r = 2 other blocks."""
    blocks, window, g, r = 12, 1, 1, 2
    pattern = block_pattern(blocks, window, g, r, 7, False)
    assert pattern[:g].all() and pattern[:, :g].all()  # global rows and columns
    for row in range(g, blocks):
        neighbours = {j for j in range(blocks) if abs(j - row) <= window}
        allowed = set(torch.nonzero(pattern[row]).flatten().tolist())
        assert neighbours | {0} <= allowed
        random_part = allowed - neighbours - {0}
        assert len(random_part) == r, (row, allowed)
    # the pattern is fixed by the seed, and another seed draws other blocks
    assert torch.equal(pattern, block_pattern(blocks, window, g, r, 7, False).clone())
    assert not torch.equal(pattern, block_pattern(blocks, window, g, r, 8, False))


def test_causal_block_pattern_is_in_the_past_and_independent_of_length() -> None:
    short = block_pattern(6, 1, 1, 2, 3, True)
    long = block_pattern(20, 1, 1, 2, 3, True)
    assert torch.equal(long[:6, :6], short)
    assert not long.triu(diagonal=1)[1:].any()  # no future block (global row 0 cut later)
    for row in range(4, 20):  # rows with >= 2 earlier candidates: exactly r random blocks
        allowed = set(torch.nonzero(long[row]).flatten().tolist())
        assert {0, row - 1, row} <= allowed
        assert len(allowed - {0, row - 1, row}) == 2
    mask = bigbird_mask(torch.arange(20), torch.arange(20), long[:5, :5], 4, causal=True)
    assert torch.equal(mask, mask.tril())  # global row 0 sees only its past too


def test_token_mask_golden() -> None:
    """b = 2, w = 0, g = 1, r = 0, n = 7: blocks {0,1} {2,3} {4,5} {6}."""
    pattern = block_pattern(4, 0, 1, 0, 0, False)
    positions = torch.arange(7)
    mask = bigbird_mask(positions, positions, pattern, 2, causal=False)
    expected = [
        [1, 1, 1, 1, 1, 1, 1],  # the global block sees everything
        [1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 0, 0, 0],  # own block + global block
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 1, 0],
        [1, 1, 0, 0, 1, 1, 0],
        [1, 1, 0, 0, 0, 0, 1],
    ]
    assert mask.int().tolist() == expected


@pytest.mark.parametrize(("length", "block"), [(40, 4), (37, 4), (9, 16), (64, 8)])
def test_weights_are_exactly_zero_outside_the_pattern(length: int, block: int) -> None:
    mechanism = BigBirdSelfAttention(block, window_blocks=1, global_blocks=1, random_blocks=2)
    q, k, v = qkv(length)
    mask = padding_mask(torch.tensor([length, length - 5]), length)
    positions = torch.arange(length)
    patterns = []  # each example's own pattern, drawn for its real blocks; padding blocks none
    blocks = -(-length // block)
    for real in (length, length - 5):
        own = mechanism.pattern(real, False)  # (nb_i, nb_i)
        padded = torch.zeros(blocks, blocks, dtype=torch.bool)
        padded[: own.size(0), : own.size(0)] = own
        own = bigbird_mask(positions, positions, padded, block, False)
        patterns.append(own)
    pattern = torch.stack(patterns)[:, None]  # (B, 1, T, S)
    if length == 40:  # really sparse: 10 blocks, at most 6 of them per row
        assert 0.3 < patterns[0].float().mean() < 0.7
    allowed = pattern & mask[:, None, None, :]
    context, weights = mechanism(q, k, v, mask, need_weights=True)
    assert torch.all(weights.masked_select(~allowed) == 0)
    assert torch.all(weights.masked_select(allowed.expand_as(weights)) > 0)
    expected, expected_weights = explicit_attention(q, k, v, allowed)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    torch.testing.assert_close(context, expected, atol=ATOL, rtol=0)
    fast, none = mechanism(q, k, v, mask)  # the block-sparse path
    assert none is None
    torch.testing.assert_close(fast, context, atol=ATOL, rtol=0)


def test_causal_weights_and_decoding_steps() -> None:
    mechanism = BigBirdSelfAttention(3, window_blocks=1, global_blocks=1, random_blocks=1)
    q, k, v = qkv(30)
    positions = torch.arange(30)
    pattern = bigbird_mask(positions, positions, mechanism.pattern(30, True), 3, causal=True)
    context, weights = mechanism(q, k, v, causal=True, need_weights=True)
    assert torch.all(weights[..., ~pattern] == 0) and torch.all(weights[..., pattern] > 0)
    fast, _ = mechanism(q, k, v, causal=True)
    torch.testing.assert_close(fast, context, atol=ATOL, rtol=0)
    # as a decoding step: the last 4 queries over every key so far
    tail, _ = mechanism.attend(Heads(q[:, :, 26:], k, v, causal=True), need_weights=False)
    torch.testing.assert_close(tail, context[:, :, 26:], atol=ATOL, rtol=0)


def test_without_random_blocks_and_a_window_over_everything_it_is_full_attention() -> None:
    q, k, v = qkv(24)
    mask = padding_mask(torch.tensor([24, 17]), 24)
    mechanism = BigBirdSelfAttention(4, window_blocks=6, global_blocks=0, random_blocks=0)
    expected, _ = explicit_attention(q, k, v, mask[:, None, None, :])
    context = mechanism(q, k, v, mask)[0]
    real = mask[:, None, :, None]  # (B, 1, N, 1): rows of padding positions are not compared
    torch.testing.assert_close(context * real, expected * real, atol=ATOL, rtol=0)


def test_global_blocks_covering_the_sequence_are_full_attention_with_no_block_matrix() -> None:
    """g b >= N: every row is global; the context is full attention's, and no (b, b) block
    is built (a block of 4096 over 24 positions would need 2 * 2 * 4096^2 floats)."""
    q, k, v = qkv(24)
    mask = padding_mask(torch.tensor([24, 17]), 24)
    expected, _ = explicit_attention(q, k, v, mask[:, None, None, :])
    real = mask[:, None, :, None]
    for block, global_blocks in ((4096, 1), (8, 3)):
        mechanism = BigBirdSelfAttention(block, global_blocks=global_blocks, random_blocks=1)
        with torch.autograd.profiler.profile(profile_memory=True) as profile:
            context = mechanism(q, k, v, mask)[0]
        largest = max(event.cpu_memory_usage for event in profile.function_events)
        assert largest < 24 * 24 * HEADS * 2 * 4 * 4  # a few (B, H, N, N) floats at most
        torch.testing.assert_close(context * real, expected * real, atol=ATOL, rtol=0)


def test_each_layer_gets_its_own_seed() -> None:
    options = AttentionConfig(kind=AttentionKind.bigbird, block_size=2, pattern_seed=5)
    seeds = []
    for index in range(3):
        module = build_self_attention(for_layer(options, index), D_MODEL, HEADS)
        assert isinstance(module.mechanism, BigBirdSelfAttention)
        seeds.append(module.mechanism.seed)
    assert seeds == [5, 6, 7]
    assert for_layer(None, 2) is None


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="block_size"):
        BigBirdSelfAttention(0)
    with pytest.raises(ValueError, match="random_blocks"):
        BigBirdSelfAttention(4, random_blocks=-1)
