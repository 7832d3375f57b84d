"""A prepared split read in place from the memory-mapped Arrow cache.

`prepare.py` stores every split as an Arrow table (columns `src`, `tgt`: texts; `src_ids`,
`tgt_ids`: token ids without BOS/EOS; `position`: the pair's place among the split's loaded
pairs). `MappedSplit` hands out views of that table that behave as the sequences the rest of
attnseq reads (`examples[i]` is `(source ids, target ids)`, `pairs[i]` is `(source text,
target text)`) without turning the columns into Python objects: a row is read when it is
asked for, so a process holds, per example, nothing but what it touches.

Why: `datasets.table.MemoryMappedTable` maps the cache files (`mmap`, read-only, shared), so
their pages belong to the page cache and not to the process: they count in RssFile, not in
RssAnon, are shared by every process that maps the same files (the ranks of a data-parallel
run on one machine) and can be dropped and read again under memory pressure. Python lists of
the same data cost about 1.5 KB of private memory per pair (fairseq's `MMapIndexedDataset` is
the same idea with its own binary format).

Reading:

- `TokenIds.lengths()`: the length of every row, (N,) int32, vectorised from the Arrow list
  offsets (no row is read): what batching needs to bucket and shuffle.
- `TokenIds.rows(indices)`: the rows of a batch as lists of ints, gathered when the batch is
  built (in DataLoader workers when there are any).

An Arrow column is a list of chunks (the record batches preparation wrote); a row index is
found in its chunk by a binary search over the chunks' first rows.

Pickling (DataLoader workers under the spawn or forkserver start methods) sends the `datasets`
table, which pickles as its file path: a worker maps the same files instead of receiving a copy.
"""

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa

Example = tuple[list[int], list[int]]


_ITERATION_ROWS = 4096  # rows read at a time when a whole column is iterated
_VIEWS = ("examples", "pairs", "positions")


class _SplitView:
    """What the three views share: pickled as (their split, their name), so that a copy maps
    the cache files again instead of carrying copies of the columns."""

    split: "MappedSplit | None" = None

    def __reduce__(self) -> Any:
        if self.split is None:
            return super().__reduce__()
        name = next(name for name in _VIEWS if getattr(self.split, name) is self)
        return getattr, (self.split, name)


class _ChunkedColumn:
    """Row lookup over the chunks of one Arrow column: chunk starts, (N,) row -> (chunk, row in
    chunk)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self.column = column
        sizes = np.fromiter((len(chunk) for chunk in column.chunks), dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)])  # (chunks + 1,)
        self.length = int(self.starts[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(chunk number, row within the chunk) of row `index` (negative counts from the end)."""
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(f"row {index} of a column of {self.length}")
        chunk = int(np.searchsorted(self.starts, index, side="right")) - 1
        return chunk, index - int(self.starts[chunk])


class TokenIds(Sequence[list[int]]):
    """A column of token-id lists (Arrow `list<int32>`), read in place.

    Each chunk's offsets and values are numpy views of the mapped buffers: row r of a chunk is
    `values[offsets[r]:offsets[r + 1]]` (Arrow's offsets already account for a sliced chunk).
    """

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._rows = _ChunkedColumn(column)
        self._offsets = [chunk.offsets.to_numpy() for chunk in column.chunks]  # (n_c + 1,) each
        self._values = [chunk.values.to_numpy() for chunk in column.chunks]  # (ids in chunk,)

    def __len__(self) -> int:
        return self._rows.length

    @overload
    def __getitem__(self, index: int) -> list[int]: ...
    @overload
    def __getitem__(self, index: slice) -> list[list[int]]: ...
    def __getitem__(self, index: int | slice) -> list[int] | list[list[int]]:
        if isinstance(index, slice):
            return self.rows(range(*index.indices(len(self))))
        chunk, row = self._rows.locate(int(index))
        offsets = self._offsets[chunk]
        return self._values[chunk][offsets[row] : offsets[row + 1]].tolist()

    def rows(self, indices: Sequence[int] | np.ndarray) -> list[list[int]]:
        """The rows at `indices`, in that order (one vectorised chunk search for all)."""
        wanted = np.asarray(indices, dtype=np.int64).reshape(-1)  # (B,)
        if wanted.size and (wanted.min() < 0 or wanted.max() >= len(self)):
            raise IndexError(f"rows {wanted.min()}..{wanted.max()} of a column of {len(self)}")
        chunks = np.searchsorted(self._rows.starts, wanted, side="right") - 1  # (B,)
        local = wanted - self._rows.starts[chunks]  # (B,)
        rows = []
        for chunk, row in zip(chunks.tolist(), local.tolist(), strict=True):
            offsets = self._offsets[chunk]
            rows.append(self._values[chunk][offsets[row] : offsets[row + 1]].tolist())
        return rows

    def lengths(self) -> np.ndarray:
        """(N,) int32: the number of ids of every row, from the offsets alone."""
        if not self._offsets:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate([np.diff(offsets) for offsets in self._offsets]).astype(np.int32)


class MappedExamples(_SplitView, Sequence[Example]):
    """(source ids, target ids) of every example of a split, read from the mapped columns."""

    def __init__(self, src: TokenIds, tgt: TokenIds) -> None:
        self.src, self.tgt = src, tgt

    def __len__(self) -> int:
        return len(self.src)

    @overload
    def __getitem__(self, index: int) -> Example: ...
    @overload
    def __getitem__(self, index: slice) -> list[Example]: ...
    def __getitem__(self, index: int | slice) -> Example | list[Example]:
        if isinstance(index, slice):
            return self.take(range(*index.indices(len(self))))
        return self.src[index], self.tgt[index]

    def __iter__(self) -> Iterator[Example]:
        for start in range(0, len(self), _ITERATION_ROWS):
            yield from self.take(range(start, min(start + _ITERATION_ROWS, len(self))))

    def take(self, indices: Sequence[int] | np.ndarray) -> list[Example]:
        """The examples at `indices`, in that order: what a batch gathers."""
        return list(zip(self.src.rows(indices), self.tgt.rows(indices), strict=True))

    def lengths(self) -> np.ndarray:
        """(N, 2) int32: (source length, target length) of every example, without reading one."""
        return np.stack([self.src.lengths(), self.tgt.lengths()], axis=1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and _equal_sequences(self, other)

    __hash__ = None  # type: ignore[assignment]


class MappedPairs(_SplitView, Sequence[tuple[str, str]]):
    """(source text, target text) of every example of a split, read when asked for: only the
    commands that show or score texts read them (hypothesis and reference files of evaluation
    splits, subword sampling, guided alignment)."""

    def __init__(self, src: pa.ChunkedArray, tgt: pa.ChunkedArray) -> None:
        self._src, self._tgt = src, tgt
        self._rows = _ChunkedColumn(src)

    def __len__(self) -> int:
        return self._rows.length

    @overload
    def __getitem__(self, index: int) -> tuple[str, str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, str]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        chunk, row = self._rows.locate(int(index))
        return (
            self._src.chunk(chunk)[row].as_py(),
            self._tgt.chunk(chunk)[row].as_py(),
        )

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for src, tgt in zip(self._src.chunks, self._tgt.chunks, strict=True):
            yield from zip(src.to_pylist(), tgt.to_pylist(), strict=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and _equal_sequences(self, other)

    __hash__ = None  # type: ignore[assignment]


class MappedPositions(_SplitView, Sequence[int]):
    """The position of each example among the split's loaded pairs (an int64 column)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column
        self._rows = _ChunkedColumn(column)

    def __len__(self) -> int:
        return self._rows.length

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        chunk, row = self._rows.locate(int(index))
        return int(self._column.chunk(chunk)[row].as_py())

    def __iter__(self) -> Iterator[int]:
        for chunk in self._column.chunks:
            yield from chunk.to_pylist()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and _equal_sequences(self, other)

    __hash__ = None  # type: ignore[assignment]


def _equal_sequences(first: Sequence[Any], second: Sequence[Any]) -> bool:
    return len(first) == len(second) and all(a == b for a, b in zip(first, second, strict=True))


class MappedSplit:
    """One split of the cache: its examples, texts and positions as views of `table`.

    Args:
        table: the split's table (a `datasets.table.MemoryMappedTable`, or any `datasets`
            table or `pyarrow.Table`), with the columns of the module docstring.
    """

    def __init__(self, table: Any) -> None:
        self.table = table
        self._views()

    def _views(self) -> None:
        arrow: pa.Table = self.table.table if hasattr(self.table, "table") else self.table
        self.examples = MappedExamples(
            TokenIds(arrow.column("src_ids")), TokenIds(arrow.column("tgt_ids"))
        )
        self.pairs = MappedPairs(arrow.column("src"), arrow.column("tgt"))
        self.positions = MappedPositions(arrow.column("position"))
        for name in _VIEWS:
            getattr(self, name).split = self

    def __len__(self) -> int:
        return len(self.examples)

    def __getstate__(self) -> dict[str, Any]:
        return {"table": self.table}  # a mapped `datasets` table pickles as its file path

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.table = state["table"]
        self._views()
