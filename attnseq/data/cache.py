"""The prepared-data cache on disk: one entry per key under `cache_root()/prepared/`.

An entry is an Arrow IPC stream per split (`splits/NAME.arrow`) and meta.json, written once
(`new_entry`) and checked against meta.json before it is mapped (`open_entry`); a damaged entry
is moved aside, never read.
"""

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from attnseq.config.choices import DataSource
from attnseq.config.schema import DataConfig
from attnseq.data.mapped_split import MappedSplit
from attnseq.data.sources import EVAL_SPLITS, HOLDOUT_FRACTION, HOLDOUT_SALT, split_files
from attnseq.data.tokenizers import TokenizerPair
from attnseq.data.workers import Chunk
from attnseq.errors import OutputError, UserError
from attnseq.io.atomic import current_umask
from attnseq.io.user_paths import fixable_write_error

log = logging.getLogger("attnseq")

# bump when an entry's layout or the length rules (data/prepare.py, `encode_chunk`) change
PREPARED_VERSION = 5
# the counts of a split, as meta.json and `PreparedData.stats` hold them
STAT_KEYS = ("total", "kept", "dropped_empty", "skipped_empty", "dropped_too_long", "truncated")

# DataConfig fields that change what prepare_data returns for file/hub data. Batching fields and
# the generated-task fields are left out, so changing them reuses the cache.
_KEY_FIELDS = (
    "source",
    "task",
    "tokenizer",
    "format",
    "splits",
    "src_lang",
    "tgt_lang",
    "src_field",
    "tgt_field",
    "hub_name",
    "hub_config",
    "max_src_len",
    "max_tgt_len",
    "max_examples",
    "spm_vocab_size",
    "spm_model_type",
    "spm_character_coverage",
    "spm_joint",
    "spm_input_sentence_size",
)
_SCHEMA = pa.schema(
    [
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("src_ids", pa.list_(pa.int32())),
        ("tgt_ids", pa.list_(pa.int32())),
        ("position", pa.int64()),
    ]
)


def cache_key(cfg: DataConfig, tokenizers: TokenizerPair | None, wanted: list[str] | None) -> str:
    """The name of the entry of these settings, data files, splits (None: all) and given
    tokenizers (None: trained on the train split)."""
    settings = {
        name: value.name if isinstance(value, Enum) else value
        for name, value in ((field, getattr(cfg, field)) for field in _KEY_FIELDS)
    }
    if cfg.source is DataSource.local:
        identity: Any = {
            split: [
                [str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns]
                for path in paths
            ]
            for split, paths in split_files(cfg).items()
        }
    else:
        # The hub copy lives in the `datasets` cache, keyed by the library; a dataset changed
        # upstream needs `rm -r <cache>/prepared` (or a pinned hub_name@revision).
        identity = {"hub": cfg.hub_name, "config": cfg.hub_config}
    material = {
        "version": PREPARED_VERSION,
        "holdout": [HOLDOUT_SALT, HOLDOUT_FRACTION, list(EVAL_SPLITS)],
        "settings": settings,
        "files": identity,
        "splits": wanted,
        "tokenizers": None
        if tokenizers is None
        else hashlib.sha256(json.dumps(tokenizers.state(), sort_keys=True).encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


@dataclass
class EncodedChunk:
    """Consecutive pairs of a split after encoding and the length rules (`encode_chunk` in
    data/prepare.py): one record batch of the split's file.

    kept: (K,) int64, the position in the chunk of each kept pair, in order.
    src_ids, tgt_ids: the kept pairs' ids (cut where a rule cuts), one pair after the other
        (int32); src_lengths, tgt_lengths: (K,) int64, how many ids each pair has.
    stats: the counts of STAT_KEYS.
    """

    kept: np.ndarray
    src_ids: np.ndarray
    src_lengths: np.ndarray
    tgt_ids: np.ndarray
    tgt_lengths: np.ndarray
    stats: dict[str, int]


@contextlib.contextmanager
def new_entry(folder: Path, tokenizers: TokenizerPair) -> Iterator["EntryBuild"]:
    """The entry `folder` of `tokenizers`, its splits written in the block (`write_split`).

    The entry is built in `<key>.tmp-<pid>@<host>.<random>` beside `folder`; when the block
    ends, meta.json is written, the files are made read-only (0444 less the umask's bits) and
    the build is renamed into place (or dropped, when another process finished the same entry
    first). When the block raises, the build is removed; a full disk or a read-only cache
    folder is then an `OutputError`.
    """
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=folder.parent, prefix=_build_prefix(folder.name)))
    except OSError as error:
        raise _cache_write_error(folder.parent, error) from None
    try:
        os.chmod(building, 0o777 & ~current_umask())  # mkdtemp's folder is private
        (building / "splits").mkdir()
        build = EntryBuild(building, tokenizers)
        yield build
        build.write_meta()
        try:
            os.rename(building, folder)
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # Another process (a parallel sweep job) finished the same entry first: keep it.
            shutil.rmtree(building, ignore_errors=True)
            return
        log.info("data: tokenized splits cached in %s", folder)
    except BaseException as error:
        shutil.rmtree(building, ignore_errors=True)
        fixable = fixable_write_error(error) if isinstance(error, OSError) else None
        if fixable is not None:
            raise _cache_write_error(folder.parent, fixable) from None
        raise


class EntryBuild:
    """An entry being written (`new_entry`): its folder, and the counts and file facts of the
    splits written so far."""

    def __init__(self, folder: Path, tokenizers: TokenizerPair) -> None:
        self.folder, self.tokenizers = folder, tokenizers
        self.stats: dict[str, dict[str, int]] = {}
        self.files: dict[str, dict[str, Any]] = {}

    def write_split(
        self, name: str, chunks: Iterable[tuple[Chunk, EncodedChunk]]
    ) -> dict[str, int]:
        """Write the split `name`, one record batch per encoded chunk, into the Arrow stream
        splits/NAME.arrow; its counts."""
        path = self.folder / "splits" / f"{name}.arrow"
        counts = dict.fromkeys(STAT_KEYS, 0)
        loaded = 0  # pairs of the split read so far: the position of the chunk's first pair
        batches = 0
        ranges: dict[str, list[int] | None] = {"src_ids": None, "tgt_ids": None}
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, _SCHEMA) as writer:
            for (sources, targets), encoded in chunks:
                kept = pa.array(encoded.kept)
                columns = [
                    pa.array(sources, pa.string()).take(kept),
                    pa.array(targets, pa.string()).take(kept),
                    _list_column(encoded.src_ids, encoded.src_lengths),
                    _list_column(encoded.tgt_ids, encoded.tgt_lengths),
                    pa.array(loaded + encoded.kept, pa.int64()),
                ]
                writer.write_batch(pa.record_batch(columns, schema=_SCHEMA))
                batches += 1
                for side, ids in (("src_ids", encoded.src_ids), ("tgt_ids", encoded.tgt_ids)):
                    ranges[side] = _widened(ranges[side], ids)
                for key in STAT_KEYS:
                    counts[key] += encoded.stats[key]
                loaded += len(sources)
        self.stats[name] = counts
        self.files[name] = {
            "rows": counts["kept"],
            "batches": batches,
            **ranges,
            **_file_facts(path),
        }
        return counts

    def write_meta(self) -> None:
        """meta.json (what every later check compares with), then every file read-only."""
        meta = {
            "version": PREPARED_VERSION,
            "splits": list(self.stats),
            "stats": self.stats,
            "files": self.files,
            "tokenizers": self.tokenizers.state(),
        }
        (self.folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        # Written once: read-only, readable as far as the umask lets the user's files be.
        for written in [*(self.folder / "splits").iterdir(), self.folder / "meta.json"]:
            os.chmod(written, 0o444 & ~current_umask())


def _cache_write_error(where: Path, error: OSError) -> BaseException:
    """The OutputError of a write into the cache that the user can fix; `error` itself when
    it is not one."""
    if fixable_write_error(error) is None:
        return error
    return OutputError(
        f"cannot write the data cache in {where}: {error.strerror or os.strerror(error.errno or 0)}"
        " (nothing was kept); free space there, or point the ATTNSEQ_CACHE environment "
        "variable at a folder with room that can be written"
    )


def _widened(current: list[int] | None, ids: np.ndarray) -> list[int] | None:
    """[smallest, largest] of the ids seen so far and `ids` (None: none yet)."""
    if not ids.size:
        return current
    low, high = int(ids.min()), int(ids.max())
    return [low, high] if current is None else [min(current[0], low), max(current[1], high)]


def _file_facts(path: Path) -> dict[str, Any]:
    """A file's byte size and BLAKE2b-256 checksum (what meta.json records and a check
    compares)."""
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, lambda: hashlib.blake2b(digest_size=32))
    return {"bytes": path.stat().st_size, "blake2b": digest.hexdigest()}


def _list_column(flat: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
    """An Arrow list<int32> column from every row's values one after the other and the rows'
    lengths (no Python list of ids)."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int32()))


class DamagedEntry(Exception):
    """A cache entry that fails a check; the message says which and how."""


@dataclass
class CachedEntry:
    """A cache entry, mapped: its tokenizers, its splits (data/mapped_split.py) and the counts
    meta.json records of each."""

    folder: Path
    tokenizers: TokenizerPair
    splits: dict[str, MappedSplit]
    stats: dict[str, dict[str, int]]


def entry_holds(folder: Path, tokenizers: TokenizerPair, wanted: list[str] | None) -> bool:
    """Whether meta.json of the entry at `folder` records these very tokenizers and every
    split of `wanted` (None: any); False when it cannot be read."""
    state = json.loads(json.dumps(tokenizers.state()))  # as meta.json holds it
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return meta.get("tokenizers") == state and set(wanted or meta["splits"]) <= set(meta["splits"])


def open_entry(
    folder: Path, verify: bool, on_damage: Literal["move", "skip", "raise"] = "move"
) -> CachedEntry | None:
    """The cached entry, its splits memory-mapped once its checks passed (`_map_entry`;
    `verify`: the checksums too), or None when there is none.

    A damaged entry is, by `on_damage`: moved aside (None: prepared again), left where it is
    (None), or a UserError (an entry this process has just written)."""
    try:
        identity = folder.stat().st_ino
    except FileNotFoundError:
        return None
    try:
        entry = _map_entry(folder, verify)
    except DamagedEntry as damage:
        if on_damage == "raise":
            raise UserError(
                f"the data cache entry {folder} is damaged just after it was written "
                f"({damage}): is another process changing the cache?"
            ) from None
        if on_damage == "skip":
            log.warning("data: the cache entry %s is damaged (%s)", folder, damage)
            return None
        return _moved_aside(folder, identity, str(damage), verify)
    log.info("data: tokenized splits loaded from cache %s", folder)
    return entry


def _moved_aside(folder: Path, identity: int, reason: str, verify: bool) -> CachedEntry | None:
    """Rename a damaged entry to `<key>.damaged-<time>-<pid>` (kept for a look, never read
    again), saying so in one line; None: the data is prepared again. When another process
    replaced the entry meanwhile, that one is opened instead."""
    aside = folder.with_name(
        f"{folder.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    )
    try:
        if folder.stat().st_ino != identity:  # a fresh entry took its place: use it
            return open_entry(folder, verify, on_damage="skip")
        os.rename(folder, aside)
    except FileNotFoundError:
        return None  # another process moved it first
    except OSError as error:
        raise UserError(
            f"the data cache entry {folder} is damaged ({reason}) and cannot be moved aside "
            f"({error.strerror}); delete that folder and run again"
        ) from None
    log.warning(
        "data: the cache entry %s is damaged (%s): moved aside to %s; preparing the data again",
        folder,
        reason,
        aside.name,
    )
    return None


def _map_entry(folder: Path, verify: bool) -> CachedEntry:
    """Map every split of a cache entry, after its checks: meta.json describes an entry of
    this layout; each split file has the size meta.json records (before it is mapped: a
    short file is never read) and, with `verify`, its checksum; the mapped table has the
    recorded rows and record batches, and token ids within the recorded range and the
    tokenizers' vocabularies. DamagedEntry naming the first failure."""
    from datasets.table import MemoryMappedTable

    meta = _read_meta(folder)
    try:
        tokenizers = TokenizerPair.from_state(meta["tokenizers"])
    except (UserError, ValueError, KeyError, TypeError) as error:
        raise DamagedEntry(f"meta.json holds unreadable tokenizers: {error}") from None
    entry = CachedEntry(folder, tokenizers, {}, {})
    vocab = {"src_ids": tokenizers.src.vocab_size, "tgt_ids": tokenizers.tgt.vocab_size}
    for name in meta["splits"]:
        facts = meta["files"][name]
        path = folder / "splits" / f"{name}.arrow"
        where = f"splits/{name}.arrow"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise DamagedEntry(f"{where} is missing") from None
        except OSError as error:
            raise UserError(f"cannot read the data cache file {path}: {error.strerror}") from None
        if size != facts["bytes"]:
            raise DamagedEntry(f"{where} holds {size} bytes, meta.json says {facts['bytes']}")
        if verify and _file_facts(path)["blake2b"] != facts["blake2b"]:
            raise DamagedEntry(f"{where} differs from the file written (its checksum)")
        try:
            table = MemoryMappedTable.from_file(str(path))  # mapped; pickles as its path
        except PermissionError as error:
            raise UserError(f"cannot read the data cache file {path}: {error.strerror}") from None
        except (OSError, ValueError, pa.ArrowException) as error:
            raise DamagedEntry(f"{where} cannot be read as Arrow ({error})") from None
        if not table.schema.equals(_SCHEMA):
            raise DamagedEntry(f"{where} has the columns {table.schema.names}, not the cache's")
        found = (table.num_rows, table.table.column("src").num_chunks)
        if found != (facts["rows"], facts["batches"]):
            raise DamagedEntry(
                f"{where} holds {found[0]} rows in {found[1]} record batches, meta.json says "
                f"{facts['rows']} in {facts['batches']}"
            )
        split = MappedSplit(table)
        for side, ids in (("src_ids", split.examples.src), ("tgt_ids", split.examples.tgt)):
            low_high = ids.id_range()
            recorded = facts[side]
            if low_high is not None and (low_high[0] < 0 or low_high[1] >= vocab[side]):
                raise DamagedEntry(
                    f"{where} holds {side.replace('_', ' ')} {low_high[0]}..{low_high[1]}, "
                    f"outside the vocabulary of {vocab[side]}"
                )
            if (list(low_high) if low_high is not None else None) != recorded:
                raise DamagedEntry(
                    f"{where} holds {side.replace('_', ' ')} {low_high}, meta.json says {recorded}"
                )
        entry.splits[name] = split
        entry.stats[name] = {key: int(value) for key, value in meta["stats"][name].items()}
    return entry


def _read_meta(folder: Path) -> dict[str, Any]:
    """meta.json of an entry, checked to describe one of this layout; DamagedEntry if not."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DamagedEntry("meta.json is missing") from None
    except NotADirectoryError:
        raise DamagedEntry("it is a file, not a folder") from None
    except PermissionError as error:
        raise UserError(f"cannot read {folder / 'meta.json'}: {error.strerror}") from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise DamagedEntry(f"meta.json is not valid JSON ({error})") from None
    try:
        if meta["version"] != PREPARED_VERSION:
            raise DamagedEntry(f"meta.json is of layout {meta['version']}, not {PREPARED_VERSION}")
        for name in meta["splits"]:
            facts, stats = meta["files"][name], meta["stats"][name]
            if not all(isinstance(stats[key], int) for key in STAT_KEYS):
                raise TypeError(f"counts of {name}: {stats}")
            for key in ("rows", "batches", "bytes"):
                if not isinstance(facts[key], int):
                    raise TypeError(f"{key} of {name}: {facts[key]!r}")
            if not isinstance(facts["blake2b"], str):
                raise TypeError(f"checksum of {name}: {facts['blake2b']!r}")
    except DamagedEntry:
        raise
    except (KeyError, TypeError, IndexError) as error:
        raise DamagedEntry(f"meta.json lacks or mistypes {error}") from None
    return meta


def check_entry(folder: Path, verify: bool = True) -> str | None:
    """What is wrong with the cache entry at `folder` (every check of `_map_entry`, the
    checksums with `verify`), None when nothing is; the entry is left as it is."""
    try:
        _map_entry(folder, verify)
    except DamagedEntry as damage:
        return str(damage)
    return None


def describe_entries(prepared: Path, verify: bool = True) -> list[tuple[str, str, bool]]:
    """(name, verdict, damaged) of every folder under `prepared` (cache_root()/prepared), in
    name order: an entry checked by `check_entry` (rows per split and size when it is
    sound), an unfinished build (its process running or gone) or an entry moved aside."""
    try:
        names = sorted(os.listdir(prepared))
    except FileNotFoundError:
        return []
    stale = {path.name for path in stale_builds(prepared)}
    rows = []
    for name in names:
        folder = prepared / name
        build = _BUILD_NAME.match(name)
        if build is not None:
            state = "gone: the next preparation removes it" if name in stale else "running"
            rows.append((name, f"unfinished build of process {build['pid']} ({state})", False))
        elif ".damaged-" in name:
            rows.append((name, "moved aside as damaged: never read again, delete it", False))
        elif (layout := _layout(folder)) not in (None, PREPARED_VERSION):
            rows.append((name, f"layout {layout}, another attnseq version's: unused here", False))
        else:
            problem = check_entry(folder, verify)
            if problem is not None:
                rows.append((name, f"damaged: {problem}", True))
                continue
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            splits = ", ".join(
                f"{split} {meta['files'][split]['rows']:,}" for split in meta["splits"]
            )
            size = sum(meta["files"][split]["bytes"] for split in meta["splits"])
            checked = "checksums match" if verify else "sizes, rows and ids checked"
            rows.append((name, f"ok ({checked}): {splits} rows, {size:,} bytes", False))
    return rows


def _layout(folder: Path) -> Any:
    """The layout version meta.json names, None when it cannot be read."""
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return None


_BUILD_NAME = re.compile(r"^(?P<key>.+)\.tmp-(?P<pid>\d+)@(?P<host>.+)\.[^.]+$")


def _build_prefix(key: str) -> str:
    """The name of an unfinished build starts with its entry's key, this process's pid and
    this host's name, so a later run can tell a build whose process is gone."""
    return f"{key}.tmp-{os.getpid()}@{socket.gethostname()}."


def stale_builds(prepared: Path) -> list[Path]:
    """The unfinished builds under `prepared` of processes on this host that have ended
    (builds of other hosts sharing the folder are theirs to judge)."""
    try:
        names = os.listdir(prepared)
    except OSError:
        return []
    host = socket.gethostname()
    stale = []
    for name in names:
        match = _BUILD_NAME.match(name)
        if match is None or match["host"] != host:
            continue
        try:
            os.kill(int(match["pid"]), 0)
        except ProcessLookupError:
            stale.append(prepared / name)
        except (PermissionError, OverflowError):
            continue  # the pid runs as another user: alive
    return stale


def remove_stale_builds(prepared: Path) -> None:
    """Remove the builds `stale_builds` finds (what a killed preparation left)."""
    for folder in stale_builds(prepared):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            log.info("data: removed %s, an unfinished build of a process that is gone", folder)
