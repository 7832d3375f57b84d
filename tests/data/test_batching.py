"""Collation (padding, BOS/EOS placement) and the token-budget batch sampler."""

import random

import numpy as np
import pytest
import torch

from attnseq.data.batching import (
    Batch,
    TokenBatchSampler,
    collate,
    encode_pairs,
    example_lengths,
    iterate_batches,
)
from attnseq.data.generated import make_splits
from attnseq.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, train_tokenizer

SPECIALS = {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}


# ------------------------------------------------------------------------------- collate
def test_collate_golden() -> None:
    examples = [([10, 11, 12], [20]), ([13], [21, 22, 23])]
    batch = collate(examples, [7, 2], **SPECIALS)
    assert torch.equal(batch.src, torch.tensor([[10, 11, 12], [13, 0, 0]]))
    assert torch.equal(batch.src_lengths, torch.tensor([3, 1]))
    assert torch.equal(batch.tgt_in, torch.tensor([[2, 20, 0, 0], [2, 21, 22, 23]]))
    assert torch.equal(batch.tgt_out, torch.tensor([[20, 3, 0, 0], [21, 22, 23, 3]]))
    assert torch.equal(batch.tgt_lengths, torch.tensor([2, 4]))
    assert torch.equal(batch.indices, torch.tensor([7, 2]))
    assert batch.alignment is None  # only guided alignment training carries a gold matrix
    assert all(t.dtype == torch.long for name, t in vars(batch).items() if name != "alignment")
    assert batch.size == 2
    assert batch.n_src_tokens == 4
    assert batch.n_tgt_tokens == 6
    assert batch.n_padded_tokens == 2 * 3 + 2 * 4
    assert torch.equal(batch.src_mask, torch.tensor([[True, True, True], [True, False, False]]))
    assert torch.equal(batch.tgt_mask, batch.tgt_out != PAD_ID)
    # tgt_out is tgt_in shifted left by one, with EOS where the target ends
    assert torch.equal(
        batch.tgt_in[:, 1:][batch.tgt_mask[:, 1:]], batch.tgt_out[:, :-1][batch.tgt_mask[:, 1:]]
    )


def test_collate_custom_ids_and_empty_sequences() -> None:
    batch = collate([([], []), ([5], [])], [0, 1], pad_id=9, bos_id=7, eos_id=8)
    assert torch.equal(batch.src, torch.tensor([[9], [5]]))  # S >= 1 even for empty sources
    assert torch.equal(batch.src_lengths, torch.tensor([0, 1]))
    assert torch.equal(batch.tgt_in, torch.tensor([[7], [7]]))
    assert torch.equal(batch.tgt_out, torch.tensor([[8], [8]]))
    with pytest.raises(ValueError, match="empty"):
        collate([], [], **SPECIALS)
    with pytest.raises(ValueError, match="indices"):
        collate([([1], [2])], [0, 1], **SPECIALS)


def test_batch_to_keeps_values() -> None:
    for links in (None, [[(1, 0)]]):  # with guided alignment's gold matrix too
        batch = collate([([4, 5], [6])], [0], **SPECIALS, alignments=links)
        moved = batch.to(torch.device("cpu"))
        assert isinstance(moved, Batch)
        for name, tensor in vars(batch).items():
            if tensor is None:
                assert getattr(moved, name) is None
            else:
                assert torch.equal(getattr(moved, name), tensor)


def test_encode_pairs_and_iterate_batches_restore_order() -> None:
    pairs = make_splits("reverse", {"valid": 40}, seed=0)["valid"]
    tok = train_tokenizer("word", [s for s, _ in pairs] + [t for _, t in pairs])
    examples = encode_pairs(pairs, tok, tok)
    assert examples[0] == (tok.encode(pairs[0][0]), tok.encode(pairs[0][1]))
    sampler = TokenBatchSampler(example_lengths(examples), max_tokens=60, shuffle=False)
    hyps: dict[int, str] = {}
    for batch in iterate_batches(examples, sampler.batches(0), **SPECIALS):
        for row, index in zip(batch.tgt_out.tolist(), batch.indices.tolist(), strict=True):
            hyps[index] = tok.decode(row)
    assert [hyps[i] for i in range(len(pairs))] == [t for _, t in pairs]


# ------------------------------------------------------------------------------- sampler
def _lengths(n: int = 1000, seed: int = 0, low: int = 3, high: int = 50) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = rng.randint(low, high)
        out.append((src, max(1, src + rng.randint(-3, 3))))  # correlated like translations
    return out


def _width(lengths: list[tuple[int, int]], batch: list[int]) -> int:
    return max(max(lengths[i][0], lengths[i][1] + 1) for i in batch)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("bucket_width", [1, 4])
def test_every_example_once_and_budget_respected(shuffle: bool, bucket_width: int) -> None:
    lengths = _lengths()
    sampler = TokenBatchSampler(
        lengths, max_tokens=500, shuffle=shuffle, seed=1, bucket_width=bucket_width
    )
    for epoch in range(3):
        batches = sampler.batches(epoch)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert len(batches) == len(sampler)  # constant across epochs
        for batch in batches:
            assert len(batch) * _width(lengths, batch) <= 500
        assert sum(len(b) for b in batches) / len(batches) > 5  # batches are actually filled


def test_max_sentences_and_oversized_example() -> None:
    lengths = [(5, 5)] * 20 + [(400, 10)]
    sampler = TokenBatchSampler(lengths, max_tokens=100, max_sentences=4, shuffle=True, seed=0)
    batches = sampler.batches(0)
    assert [20] in batches  # longer than the budget: a batch of its own
    assert all(len(b) <= 4 for b in batches)
    assert sorted(len(b) for b in batches) == [1, 4, 4, 4, 4, 4]


def test_padding_share_counts_each_batch_as_collate_pads_it() -> None:
    lengths = _lengths() + [(0, 4)]  # an empty source still takes one padded position
    for shuffle in (True, False):
        sampler = TokenBatchSampler(lengths, max_tokens=400, shuffle=shuffle, seed=2)
        real = padded = 0
        for batch in sampler.batches(3):
            real += sum(lengths[i][0] + lengths[i][1] + 1 for i in batch)
            longest_src = max(1, max(lengths[i][0] for i in batch))
            padded += len(batch) * (longest_src + max(lengths[i][1] + 1 for i in batch))
        assert sampler.padding_share(3) == pytest.approx(1 - real / padded)
        assert sampler.batches(3) == sampler.batches(3)  # asking again: the same epoch
    assert TokenBatchSampler([], max_tokens=400).padding_share(0) == 0.0


def test_same_seed_and_epoch_same_batches_other_epoch_other_order() -> None:
    lengths = _lengths()
    a = TokenBatchSampler(lengths, max_tokens=400, seed=3)
    b = TokenBatchSampler(lengths, max_tokens=400, seed=3)
    assert a.batches(5) == b.batches(5)  # a fresh instance (a resumed run) sees the same
    assert a.batches(5) == a.batches(5)
    assert a.batches(5) != a.batches(6)
    assert TokenBatchSampler(lengths, max_tokens=400, seed=4).batches(5) != a.batches(5)
    # Tie-breaking changes which examples share a batch, not only the batch order.
    assert {tuple(sorted(x)) for x in a.batches(0)} != {tuple(sorted(x)) for x in a.batches(1)}
    # Resuming at (epoch, position) continues with exactly the remaining batches.
    position = 7
    done = a.batches(2)[:position]
    rest = b.batches(2)[position:]
    assert sorted(i for x in done + rest for i in x) == list(range(len(lengths)))
    a.set_epoch(2)
    assert list(a) == a.batches(2)


def test_unshuffled_batches_are_length_sorted_and_fixed() -> None:
    lengths = _lengths(300)
    sampler = TokenBatchSampler(lengths, max_tokens=300, shuffle=False, seed=0)
    batches = sampler.batches(0)
    assert sampler.batches(1) == batches
    flat = [i for b in batches for i in b]
    widths = [max(lengths[i][0], lengths[i][1] + 1) for i in flat]
    assert widths == sorted(widths)


def test_padding_share_buckets_vs_random() -> None:
    lengths = _lengths(2000, seed=5)
    bucketed = TokenBatchSampler(lengths, max_tokens=1000, seed=0)
    random_batches = TokenBatchSampler(lengths, max_tokens=1000, seed=0, bucket_width=10**6)
    share, random_share = bucketed.padding_share(0), random_batches.padding_share(0)
    assert share < 0.1
    assert random_share > 0.4
    assert random_share > 5 * share
    # A few wide buckets pad more than exact lengths and much less than one bucket.
    mid = TokenBatchSampler(lengths, max_tokens=1000, seed=0, num_buckets=8).padding_share(0)
    assert share < mid < random_share


def test_padding_share_matches_collate() -> None:
    lengths = _lengths(200, seed=2)
    examples = [([5] * s, [6] * t) for s, t in lengths]
    sampler = TokenBatchSampler(lengths, max_tokens=200, seed=0, bucket_width=3)
    real = padded = 0
    for batch in iterate_batches(examples, sampler.batches(4), **SPECIALS):
        real += batch.n_src_tokens + batch.n_tgt_tokens
        padded += batch.n_padded_tokens
    assert sampler.padding_share(4) == pytest.approx(1 - real / padded)


def test_sampler_argument_checks() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        TokenBatchSampler([(1, 1)], max_tokens=0)
    with pytest.raises(ValueError, match="not both"):
        TokenBatchSampler([(1, 1)], max_tokens=10, bucket_width=2, num_buckets=2)
    empty = TokenBatchSampler([], max_tokens=10)
    assert empty.batches(0) == [] and len(empty) == 0 and empty.padding_share(0) == 0.0


def greedy_cut(order: list[int], width: list[int], max_tokens: int, max_sentences: int | None):
    """The cut `TokenBatchSampler` makes, walked example by example: the definition its
    vectorised cut must reproduce."""
    batches: list[list[int]] = []
    current: list[int] = []
    current_width = 0
    for index in order:
        new_width = max(current_width, width[index])
        full = (len(current) + 1) * new_width > max_tokens or (
            max_sentences is not None and len(current) >= max_sentences
        )
        if current and full:
            batches.append(current)
            current, new_width = [], width[index]
        current.append(index)
        current_width = new_width
    return batches + ([current] if current else [])


@pytest.mark.parametrize(
    ("max_tokens", "max_sentences", "bucket_width"),
    [(64, None, None), (50, 3, None), (7, None, 2), (200, 16, 5), (9, 1, None)],
)
def test_vectorised_cut_equals_the_example_by_example_walk(
    max_tokens: int, max_sentences: int | None, bucket_width: int | None
) -> None:
    """Over lengths with long and over-budget examples, shuffled and unshuffled, every epoch's
    batches are the walk's batches of the same order (batch order shuffled the same way)."""
    rng = np.random.default_rng(3)
    lengths = np.stack([rng.integers(0, 40, 3000), rng.integers(0, 30, 3000)], axis=1)
    lengths[:5] = [[0, 0], [60, 1], [1, 80], [39, 29], [0, 12]]
    for shuffle in (True, False):
        sampler = TokenBatchSampler(
            lengths,
            max_tokens,
            max_sentences=max_sentences,
            shuffle=shuffle,
            seed=7,
            bucket_width=bucket_width,
        )
        for epoch in (0, 1):
            batches = sampler.batches(epoch)
            if shuffle:  # the walk of the same sorted order, batches in the same shuffled order
                generator = np.random.default_rng([7, epoch])
                tie_break = generator.permutation(len(lengths))
                w = sampler.bucket_width
                src, tgt1 = sampler._src, sampler._tgt1
                order = np.lexsort((tie_break, tgt1 // w, src // w, sampler._bucket))
                walk = greedy_cut(
                    order.tolist(), sampler._bucket_max_width.tolist(), max_tokens, max_sentences
                )
                walk = [walk[i] for i in generator.permutation(len(walk))]
            else:
                src, tgt1 = lengths[:, 0], lengths[:, 1] + 1
                width = np.maximum(src, tgt1)
                order = np.lexsort((np.arange(len(lengths)), tgt1, src, width))
                walk = greedy_cut(order.tolist(), width.tolist(), max_tokens, max_sentences)
            assert batches == walk
            assert [b.tolist() for b in sampler.epoch_batches(epoch)] == walk


def test_bucket_widths_are_the_largest_width_of_each_bucket() -> None:
    lengths = [(1, 0), (2, 2), (5, 1), (7, 7), (3, 9), (12, 1)]
    sampler = TokenBatchSampler(lengths, 100, bucket_width=4)
    widths = [max(s, t + 1) for s, t in lengths]  # 1, 3, 5, 8, 10, 12
    buckets = [(w - 1) // 4 for w in widths]
    expected = [
        max(v for v, b in zip(widths, buckets, strict=True) if b == bucket) for bucket in buckets
    ]
    assert sampler._bucket_max_width.tolist() == expected == [3, 3, 8, 8, 12, 12]


@pytest.mark.parametrize("high", [50, 3_000_000])  # packed in one int64 key; too wide: lexsort
def test_stable_order_is_lexsort(high: int) -> None:
    from attnseq.data.batching import _stable_order

    rng = np.random.default_rng(5)
    keys = tuple(rng.integers(0, high, 5000) for _ in range(3))
    start = rng.permutation(5000)
    ranks = np.empty_like(start)
    ranks[start] = np.arange(5000)
    expected = np.lexsort((ranks, keys[2], keys[1], keys[0]))
    assert _stable_order(keys, start).tolist() == expected.tolist()
