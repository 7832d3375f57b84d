"""BatchLoader: the same batches, in the same order, with or without worker processes."""

import pytest
import torch

from attnseq.data.batching import CopyBatch, collate
from attnseq.data.extended_vocab import ExtendedExample
from attnseq.data.loader import BatchLoader

PAD, BOS, EOS = 0, 1, 2


def examples(n: int = 40) -> list[tuple[list[int], list[int]]]:
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        length = int(torch.randint(1, 9, (1,), generator=generator))
        src = torch.randint(3, 20, (length,), generator=generator).tolist()
        out.append((src, src[::-1]))
    return out


def test_workers_yield_the_same_batches_and_counts_as_the_training_process() -> None:
    data = examples()
    batches = [[3, 1, 4], [15, 9], [2, 6, 5, 35], [8]]
    kwargs = dict(pad_id=PAD, bos_id=BOS, eos_id=EOS, device=torch.device("cpu"))
    inline = list(BatchLoader(data, num_workers=0, **kwargs)(batches))
    workers = list(BatchLoader(data, num_workers=2, **kwargs)(batches))
    assert len(inline) == len(workers) == len(batches)
    for indices, (a, counts_a), (b, counts_b) in zip(batches, inline, workers, strict=True):
        expected = collate([data[i] for i in indices], indices, pad_id=PAD, bos_id=BOS, eos_id=EOS)
        for name in ("src", "src_lengths", "tgt_in", "tgt_out", "tgt_lengths", "indices"):
            assert torch.equal(getattr(a, name), getattr(expected, name)), name
            assert torch.equal(getattr(b, name), getattr(expected, name)), name
        assert counts_a == counts_b
        assert counts_a.src == sum(len(data[i][0]) for i in indices)
        assert counts_a.tgt == sum(len(data[i][1]) + 1 for i in indices)  # + EOS
        assert counts_a.padded == expected.src.numel() + expected.tgt_in.numel()


def test_no_batches_yield_nothing() -> None:
    loader = BatchLoader(
        examples(), pad_id=PAD, bos_id=BOS, eos_id=EOS, device=torch.device("cpu"), num_workers=2
    )
    assert list(loader([])) == []


def test_copy_models_get_copy_batches_with_or_without_workers() -> None:
    """The extended-vocabulary views travel with their examples, also through worker processes."""
    data = examples(6)
    extended = [
        ExtendedExample(src_ext=[*src[:-1], 50 + i], tgt_ext=tgt, oovs=[f"w{i}"])
        for i, (src, tgt) in enumerate(data)
    ]
    batches = [[4, 0], [5, 2, 1]]
    kwargs = dict(pad_id=PAD, bos_id=BOS, eos_id=EOS, device=torch.device("cpu"))
    for workers in (0, 2):
        loaded = list(BatchLoader(data, num_workers=workers, extended=extended, **kwargs)(batches))
        for indices, (batch, _) in zip(batches, loaded, strict=True):
            assert isinstance(batch, CopyBatch)
            assert batch.oovs == [[f"w{i}"] for i in indices]
            assert [
                row[len(data[i][0]) - 1]
                for i, row in zip(indices, batch.src_ext.tolist(), strict=True)
            ] == [50 + i for i in indices]


def test_extended_views_must_match_the_examples() -> None:
    with pytest.raises(ValueError, match="extended views"):
        BatchLoader(
            examples(3),
            pad_id=PAD,
            bos_id=BOS,
            eos_id=EOS,
            device=torch.device("cpu"),
            extended=[ExtendedExample(src_ext=[], tgt_ext=[], oovs=[])],
        )
