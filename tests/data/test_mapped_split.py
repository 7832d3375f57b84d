"""The memory-mapped views of a cached split: rows, lengths and batches read in place, across
Arrow chunks, equal to the lists they stand for, pickled as the path of their files."""

import pickle
from pathlib import Path

import datasets
import numpy as np
import pytest

from attnseq.data.mapped_split import MappedSplit

SRC_IDS = [[5, 6, 7], [], [8], [9, 10, 11, 12], [13, 14], [4]]
TGT_IDS = [[1], [2, 3], [], [4, 5], [6, 7, 8], [9, 9, 9, 9, 9]]
SRC = ["a b c", "", "d", "e f g h", "i j", "k"]
TGT = ["x", "y z", "", "u v", "w t s", "q q q q q"]


@pytest.fixture
def mapped(tmp_path: Path) -> MappedSplit:
    """The six rows saved with `datasets` and mapped back."""
    table = datasets.Dataset.from_dict(
        {
            "src": SRC,
            "tgt": TGT,
            "src_ids": SRC_IDS,
            "tgt_ids": TGT_IDS,
            "position": [0, 2, 3, 5, 6, 9],
        },
        features=datasets.Features(
            {
                "src": datasets.Value("string"),
                "tgt": datasets.Value("string"),
                "src_ids": datasets.List(datasets.Value("int32")),
                "tgt_ids": datasets.List(datasets.Value("int32")),
                "position": datasets.Value("int64"),
            }
        ),
    )
    table.save_to_disk(str(tmp_path / "split"))
    return MappedSplit(datasets.load_from_disk(str(tmp_path / "split")).data)


def test_rows_lengths_and_batches_read_in_place(mapped: MappedSplit) -> None:
    examples = mapped.examples
    expected = list(zip(SRC_IDS, TGT_IDS, strict=True))
    assert len(examples) == 6
    assert [examples[i] for i in range(6)] == expected
    assert examples[-1] == expected[-1]
    assert list(examples) == expected and examples == expected
    assert examples[1:5] == expected[1:5]
    assert examples.take(np.array([5, 0, 3])) == [expected[5], expected[0], expected[3]]
    assert examples.lengths().tolist() == [[len(s), len(t)] for s, t in expected]
    assert examples.lengths().dtype == np.int32
    with pytest.raises(IndexError):
        examples[6]
    with pytest.raises(IndexError):
        examples.take([0, 6])


def test_texts_and_positions(mapped: MappedSplit) -> None:
    assert list(mapped.pairs) == list(zip(SRC, TGT, strict=True))
    assert mapped.pairs[4] == ("i j", "w t s")
    assert mapped.pairs[-1] == (SRC[-1], TGT[-1])
    assert list(mapped.positions) == [0, 2, 3, 5, 6, 9] and mapped.positions[3] == 5


ROWS = [[i] * (i % 7) for i in range(2500)]


@pytest.fixture
def chunked(tmp_path: Path) -> MappedSplit:
    """2,500 rows: `datasets` writes record batches of 1,000 rows, so three chunks."""
    rows = ROWS
    table = datasets.Dataset.from_dict(
        {
            "src": ["s"] * 2500,
            "tgt": ["t"] * 2500,
            "src_ids": rows,
            "tgt_ids": rows,
            "position": list(range(2500)),
        }
    )
    table.save_to_disk(str(tmp_path / "many"))
    return MappedSplit(datasets.load_from_disk(str(tmp_path / "many")).data)


def test_several_chunks(chunked: MappedSplit) -> None:
    split, rows = chunked, ROWS
    assert split.examples.src._rows.starts.tolist() == [0, 1000, 2000, 2500]
    picks = [2499, 0, 999, 1000, 1001, 1500]
    assert split.examples.take(picks) == [(rows[i], rows[i]) for i in picks]
    assert split.examples.lengths()[:, 0].tolist() == [i % 7 for i in range(2500)]


def test_pickles_as_the_path_of_its_files(chunked: MappedSplit) -> None:
    """A DataLoader worker started by spawn gets the file to map, not a copy of the columns."""
    ids_bytes = sum(len(row) for row in ROWS) * 4 * 2  # int32 ids of both sides
    blob = pickle.dumps(chunked.examples)
    assert len(blob) < ids_bytes / 10, (len(blob), ids_bytes)
    assert list(pickle.loads(blob)) == list(chunked.examples)
    assert list(pickle.loads(pickle.dumps(chunked.pairs))) == list(chunked.pairs)
