"""A prepared split read in place from the memory-mapped Arrow cache: `MappedSplit`.

Columns: `src`, `tgt` (texts), `src_ids`, `tgt_ids` (token ids without BOS/EOS) and `position`
(the pair's place among the split's loaded pairs). A row is read when it is asked for; the
mapped pages are the page cache's, shared by every process that maps the same file.
"""

import contextlib
import ctypes
import os
import signal
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import pyarrow as pa

from attnseq.errors import UserError

Example = tuple[list[int], list[int]]
Row = TypeVar("Row")


_ITERATION_ROWS = 4096  # rows read at a time when a whole column is iterated
_VIEWS = ("examples", "pairs", "positions")


class _SplitView(Sequence[Row]):
    """What the three views share: a row by its index (`_row`), a slice as a list, equality
    with any sequence of the same rows, and pickling as (their split, their name), so that a
    copy maps the cache files again instead of carrying copies of the columns."""

    split: "MappedSplit | None" = None

    def _row(self, index: int) -> Row:
        raise NotImplementedError

    def take(self, indices: Sequence[int] | np.ndarray) -> list[Row]:
        """The rows at `indices`, in that order."""
        return [self._row(index) for index in indices]

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return self.take(range(*index.indices(len(self))))
        return self._row(index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and _equal_sequences(self, other)

    __hash__ = None  # type: ignore[assignment]

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

    def id_range(self) -> tuple[int, int] | None:
        """(smallest, largest) id of the whole column, None when it holds no id: one
        vectorised pass over the ids (not the texts) of every chunk."""
        ranges = [(int(values.min()), int(values.max())) for values in self._values if values.size]
        if not ranges:
            return None
        return min(low for low, _ in ranges), max(high for _, high in ranges)


class MappedExamples(_SplitView[Example]):
    """(source ids, target ids) of every example of a split, read from the mapped columns."""

    def __init__(self, src: TokenIds, tgt: TokenIds) -> None:
        self.src, self.tgt = src, tgt

    def __len__(self) -> int:
        return len(self.src)

    def _row(self, index: int) -> Example:
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

    def check_unchanged(self) -> None:
        """CacheFileChanged when the file these examples are read from changed since it was
        mapped (`MappedSplit.check_unchanged`)."""
        if self.split is not None:
            self.split.check_unchanged()


class MappedPairs(_SplitView[tuple[str, str]]):
    """(source text, target text) of every example of a split, read when asked for: only the
    commands that show or score texts read them (hypothesis and reference files of evaluation
    splits, subword sampling, guided alignment)."""

    def __init__(self, src: pa.ChunkedArray, tgt: pa.ChunkedArray) -> None:
        self._src, self._tgt = src, tgt
        self._rows = _ChunkedColumn(src)

    def __len__(self) -> int:
        return self._rows.length

    def _row(self, index: int) -> tuple[str, str]:
        chunk, row = self._rows.locate(int(index))
        return (
            self._src.chunk(chunk)[row].as_py(),
            self._tgt.chunk(chunk)[row].as_py(),
        )

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for src, tgt in zip(self._src.chunks, self._tgt.chunks, strict=True):
            yield from zip(src.to_pylist(), tgt.to_pylist(), strict=True)


class MappedPositions(_SplitView[int]):
    """The position of each example among the split's loaded pairs (an int64 column)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column
        self._rows = _ChunkedColumn(column)

    def __len__(self) -> int:
        return self._rows.length

    def _row(self, index: int) -> int:
        chunk, row = self._rows.locate(int(index))
        return int(self._column.chunk(chunk)[row].as_py())

    def __iter__(self) -> Iterator[int]:
        for chunk in self._column.chunks:
            yield from chunk.to_pylist()


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
        self._watch()

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
        self._watch()

    def _watch(self) -> None:
        path = getattr(self.table, "path", None)  # a `datasets` MemoryMappedTable's file
        self._watched = _Watched(Path(path)) if path else None

    def check_unchanged(self) -> None:
        """CacheFileChanged when the mapped file's size or modification time is no longer
        what it was when it was mapped (a table in memory never changes)."""
        if self._watched is not None:
            self._watched.check()


# ------------------------------------------------------------------------------ watching
class CacheFileChanged(UserError):
    """A memory-mapped cache file was truncated or rewritten while this process read it."""


def _changed_message(path: Path, was: os.stat_result, now: os.stat_result) -> str:
    change = (
        f"truncated to {now.st_size} bytes (it held {was.st_size})"
        if now.st_size < was.st_size
        else f"rewritten ({now.st_size} bytes, modified after it was mapped)"
    )
    return (
        f"the data cache file {path} was {change} while this run read it: another process "
        "changed the cache; the next run checks the entry and prepares the data again if it "
        "is damaged"
    )


class _Watched:
    """One mapped file, its descriptor kept open (the file as mapped, even when its name is
    reused) and its size and modification time then; registered for the SIGBUS handler
    while it lives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.mapped = os.fstat(self.fd)
        _WATCHED[id(self)] = self
        weakref.finalize(self, _close, self.fd)
        _install_bus_handler()

    def now(self) -> os.stat_result:
        return os.fstat(self.fd)

    def check(self) -> None:
        now = self.now()
        if (now.st_size, now.st_mtime_ns) != (self.mapped.st_size, self.mapped.st_mtime_ns):
            raise CacheFileChanged(_changed_message(self.path, self.mapped, now))

    def truncated(self) -> str | None:
        """The one-line message when the file is now shorter than when it was mapped."""
        now = self.now()
        return (
            _changed_message(self.path, self.mapped, now)
            if now.st_size < self.mapped.st_size
            else None
        )


_WATCHED: "weakref.WeakValueDictionary[int, _Watched]" = weakref.WeakValueDictionary()


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


# A file truncated under its readers makes the next read of a page past its end fault with
# SIGBUS. Python's `signal.signal` cannot answer it (its handler sets a flag and returns, and
# the read faults again forever), so the handler is C-level: libc's `signal` with a ctypes
# callback that, in the faulting thread, writes one line and ends the process with exit
# status 2 when a watched file shrank, and otherwise hands the signal to the handler before.
_BUS_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int)
_bus: dict[str, Any] = {"handler": None, "previous": None, "quiet": False, "install": None}
_bus_lock = threading.Lock()


def _libc_signal() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    install = libc.signal
    install.restype = ctypes.c_void_p
    install.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return install


def _on_bus_error(signum: int) -> None:
    for watched in list(_WATCHED.values()):
        try:
            message = watched.truncated()
        except OSError:
            continue
        if message is not None:
            if not _bus["quiet"]:
                os.write(2, f"error: {message}\n".encode("utf-8", "replace"))
            os._exit(2)
    # Not a watched file: the handler before ours, which gets the signal again on return (a
    # fault also repeats), so the process ends as it would have without this handler.
    _bus["install"](signum, _bus["previous"])
    signal.pthread_kill(threading.get_ident(), signum)


def _install_bus_handler(quiet: bool | None = None) -> None:
    """Install the SIGBUS handler once per process (again after another library replaced it
    when `quiet` is given: DataLoader workers, which report through their parent)."""
    if not hasattr(signal, "SIGBUS") or os.name != "posix":
        return
    with _bus_lock:
        if _bus["handler"] is not None and quiet is None:
            return
        try:
            install = _libc_signal()
        except (OSError, AttributeError):
            return  # no C library to ask: the epoch checks remain
        if _bus["handler"] is None:
            _bus["handler"], _bus["install"] = _BUS_HANDLER_TYPE(_on_bus_error), install
        if quiet is not None:
            _bus["quiet"] = quiet
        handler = ctypes.cast(_bus["handler"], ctypes.c_void_p)
        previous = install(signal.SIGBUS, handler)
        if previous != handler.value:
            _bus["previous"] = previous


def watch_in_worker() -> None:
    """In a DataLoader worker: the SIGBUS handler again (torch installs its own there),
    ending the worker without a line: its parent finds the worker gone, checks the files
    and reports (data/loader.py)."""
    if _WATCHED:
        _install_bus_handler(quiet=True)
