"""The prepared-data cache on disk: one entry per key under `cache_root()/prepared/`.

An entry is an Arrow IPC stream per split (`splits/NAME.arrow`) and meta.json, written once
(`new_entry`) and checked against meta.json before it is mapped (`open_entry`); a damaged entry
is moved aside, never read. meta.json records what built the entry (`entry_record`, whose
digest is its name) and its tokenizers' digests: an entry reached under another key (a copy, a
symbolic link) or given other tokenizers is damage too.
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
from attnseq.io.user_paths import fixable_write_error, special_file_kind

log = logging.getLogger("attnseq")

# bump when an entry's layout or the length rules (data/prepare.py, `encode_chunk`) change
PREPARED_VERSION = 6
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


def entry_record(
    cfg: DataConfig, tokenizers: TokenizerPair | None, wanted: list[str] | None
) -> dict[str, Any]:
    """What the entry of these settings, data files, splits (None: all) and given tokenizers
    (None: trained on the train split) is built from, as meta.json records it; its digest
    (`record_key`) names the entry."""
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
        "tokenizers": None if tokenizers is None else _digest(tokenizers.state()),
    }
    return json.loads(json.dumps(material, sort_keys=True))  # as meta.json holds it


def record_key(record: dict[str, Any]) -> str:
    """The name of the entry built from `record` (`entry_record`)."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]


def cache_key(cfg: DataConfig, tokenizers: TokenizerPair | None, wanted: list[str] | None) -> str:
    """The name of the entry of these settings, data files, splits and given tokenizers
    (`entry_record`)."""
    return record_key(entry_record(cfg, tokenizers, wanted))


def _digest(value: Any) -> str:
    """SHA-256 of a JSON value (a tokenizer's state), the same for equal values."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _built_splits(record: dict[str, Any]) -> list[str]:
    """The splits an entry built from `record` holds: the wanted ones, else every split of
    data.splits and the held-out evaluation splits (what `split_streams` reads)."""
    if record["splits"] is not None:
        return list(record["splits"])
    return list(dict.fromkeys([*record["settings"]["splits"], *EVAL_SPLITS]))


def _differences(recorded: Any, wanted: Any, where: str = "") -> list[tuple[str, str | None]]:
    """The dotted names at which two records differ, each with both values when they are
    short."""
    if isinstance(recorded, dict) and isinstance(wanted, dict):
        return [
            difference
            for key in sorted(set(recorded) | set(wanted), key=str)
            for difference in _differences(
                recorded.get(key), wanted.get(key), f"{where}.{key}" if where else str(key)
            )
        ]
    if recorded == wanted:
        return []
    short = len(repr(recorded)) + len(repr(wanted)) <= 80
    return [(where or "the record", f"{recorded!r} recorded, {wanted!r} wanted" if short else None)]


def _said_differences(differences: list[tuple[str, str | None]]) -> str:
    """ "settings.max_examples differ (30 recorded, 50 wanted)", of at most three names."""
    shown = differences[:3]
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    values = "; ".join(
        detail if len(shown) == 1 else f"{name}: {detail}" for name, detail in shown if detail
    )
    return f"{', '.join(name for name, _ in shown)}{more} differ" + (
        f" ({values})" if values else ""
    )


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
def new_entry(
    folder: Path, tokenizers: TokenizerPair, record: dict[str, Any]
) -> Iterator["EntryBuild"]:
    """The entry `folder` of `tokenizers`, built from `record` (`entry_record`), its splits
    written in the block (`write_split`).

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
        build = EntryBuild(building, tokenizers, record)
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
    """An entry being written (`new_entry`): its folder, tokenizers and record, and the counts
    and file facts of the splits written so far."""

    def __init__(self, folder: Path, tokenizers: TokenizerPair, record: dict[str, Any]) -> None:
        self.folder, self.tokenizers, self.record = folder, tokenizers, record
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
            "tokenizer_digests": {
                side: _digest(state) for side, state in self.tokenizers.state().items()
            },
            "built_by": self.record,
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
        meta = _read_meta(folder)
    except (DamagedEntry, UserError):
        return False
    return meta["tokenizers"] == state and set(wanted or meta["splits"]) <= set(meta["splits"])


def open_entry(
    folder: Path,
    verify: bool,
    on_damage: Literal["move", "skip", "raise"] = "move",
    expected: dict[str, Any] | None = None,
) -> CachedEntry | None:
    """The cached entry, its splits memory-mapped once its checks passed (`_map_entry`;
    `verify`: the checksums and the encoding too; `expected`: the record it must have been
    built from), or None when there is none.

    A damaged entry is, by `on_damage`: moved aside (None: prepared again), left where it is
    (None), or a UserError (an entry this process has just written)."""
    try:
        identity = folder.stat().st_ino
    except FileNotFoundError:
        return None
    try:
        entry = _map_entry(folder, verify, expected)
    except DamagedEntry as damage:
        if on_damage == "raise":
            raise UserError(
                f"the data cache entry {folder} is damaged just after it was written "
                f"({damage}): is another process changing the cache?"
            ) from None
        if on_damage == "skip":
            log.warning("data: the cache entry %s is damaged (%s)", folder, damage)
            return None
        return _moved_aside(folder, identity, str(damage), verify, expected)
    log.info("data: tokenized splits loaded from cache %s", folder)
    return entry


def _moved_aside(
    folder: Path, identity: int, reason: str, verify: bool, expected: dict[str, Any] | None
) -> CachedEntry | None:
    """Rename a damaged entry (a symbolic link: the link) to `<key>.damaged-<time>-<pid>`
    (kept for a look, never read again), saying so in one line; None: the data is prepared
    again. When another process replaced the entry meanwhile, that one is opened instead."""
    aside = folder.with_name(
        f"{folder.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    )
    try:
        if folder.stat().st_ino != identity:  # a fresh entry took its place: use it
            return open_entry(folder, verify, on_damage="skip", expected=expected)
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


def _map_entry(folder: Path, verify: bool, expected: dict[str, Any] | None) -> CachedEntry:
    """Map every split of a cache entry, after its checks: meta.json describes an entry of
    this layout, built from `expected` (None: from the record its name is the key of), with
    the tokenizers whose digests it records and the splits that record makes; each split
    file is a file of the size meta.json records (before it is mapped: a short file is never
    read) and, with `verify`, its checksum; the mapped table has the recorded rows and record
    batches, and token ids within the recorded range and the tokenizers' vocabularies; with
    `verify`, the tokenizers make of every text the ids stored. DamagedEntry naming the first
    failure."""
    meta = _read_meta(folder)
    _check_record(folder, meta, expected)
    tokenizers = _entry_tokenizers(meta)
    entry = CachedEntry(folder, tokenizers, {}, {})
    for name in meta["splits"]:
        entry.splits[name] = _map_split(folder, name, meta["files"][name], tokenizers, verify)
        entry.stats[name] = {key: int(value) for key, value in meta["stats"][name].items()}
    return entry


def _entry_tokenizers(meta: dict[str, Any]) -> TokenizerPair:
    """The tokenizers meta.json holds, checked against their recorded digests and, for an
    entry built for given tokenizers, against those; DamagedEntry if not."""
    try:
        tokenizers = TokenizerPair.from_state(meta["tokenizers"])
    except (UserError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise DamagedEntry(f"meta.json holds unreadable tokenizers: {error}") from None
    for side in ("src", "tgt"):
        if _digest(meta["tokenizers"][side]) != meta["tokenizer_digests"].get(side):
            raise DamagedEntry(
                f"meta.json's {side} tokenizer is not the one the entry was built with (its "
                "digest differs from the recorded one)"
            )
    given = meta["built_by"]["tokenizers"]
    if given is not None and given != _digest(meta["tokenizers"]):
        raise DamagedEntry("meta.json's tokenizers are not the given ones it was built for")
    return tokenizers


def _map_split(
    folder: Path, name: str, facts: dict[str, Any], tokenizers: TokenizerPair, verify: bool
) -> MappedSplit:
    """The split `name` of an entry mapped, after the checks of `_map_entry` against its
    `facts` (meta.json's files.NAME)."""
    from datasets.table import MemoryMappedTable

    path = folder / "splits" / f"{name}.arrow"
    where = f"splits/{name}.arrow"
    try:
        info = path.stat()
    except FileNotFoundError:
        raise DamagedEntry(f"{where} is missing") from None
    except OSError as error:
        raise UserError(f"cannot read the data cache file {path}: {error.strerror}") from None
    kind = special_file_kind(info.st_mode)
    if kind is not None:
        raise DamagedEntry(f"{where} is {kind}, not a file")
    if info.st_size != facts["bytes"]:
        raise DamagedEntry(f"{where} holds {info.st_size} bytes, meta.json says {facts['bytes']}")
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
    vocab = {"src_ids": tokenizers.src.vocab_size, "tgt_ids": tokenizers.tgt.vocab_size}
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
    if verify:
        _check_encoding(table.table, tokenizers, where)
    return split


def _check_record(folder: Path, meta: dict[str, Any], expected: dict[str, Any] | None) -> None:
    """DamagedEntry unless the entry was built from `expected` (None: from the record whose
    key is its name) and holds the splits that record makes."""
    recorded = meta["built_by"]
    link = f" (a symbolic link to {os.readlink(folder)})" if folder.is_symlink() else ""
    if expected is not None and recorded != expected:
        differ = _said_differences(_differences(recorded, expected))
        raise DamagedEntry(f"it was built for other data{link}: {differ}")
    if expected is None and record_key(recorded) != folder.name:
        raise DamagedEntry(
            f"meta.json records the making of the entry {record_key(recorded)}, not of "
            f"{folder.name}{link}"
        )
    try:
        built = _built_splits(recorded)
    except (KeyError, TypeError) as error:
        raise DamagedEntry(f"meta.json's built_by lacks or mistypes {error}") from None
    if set(meta["splits"]) != set(built):
        raise DamagedEntry(
            f"meta.json lists the splits {', '.join(meta['splits']) or '(none)'}; the entry was "
            f"built with {', '.join(built)}"
        )


def _check_encoding(table: pa.Table, tokenizers: TokenizerPair, where: str) -> None:
    """DamagedEntry unless the tokenizers make of every text of the split the ids stored
    (those the length rules kept: a prefix of them)."""
    first = 0  # the row of the batch's first row
    for batch in table.to_batches():
        for side, tokenizer in (("src", tokenizers.src), ("tgt", tokenizers.tgt)):
            flat, lengths = tokenizer.encode_flat(batch.column(side).to_pylist())
            column = batch.column(f"{side}_ids")
            stored = column.flatten().to_numpy(zero_copy_only=False)
            stored_lengths = np.diff(column.offsets.to_numpy()).astype(np.int64)
            remade, remade_lengths = take_prefixes(
                flat, lengths, np.arange(len(lengths)), stored_lengths
            )
            ends = np.cumsum(stored_lengths)
            wrong = np.flatnonzero(remade_lengths != stored_lengths)
            if not wrong.size:
                differs = np.flatnonzero(remade != stored)
                wrong = np.searchsorted(ends, differs[:1], side="right")
            if wrong.size:
                raise DamagedEntry(
                    "meta.json's tokenizers are not the ones that built it: the "
                    f"{side} tokenizer makes of its text other ids than {where} holds (row "
                    f"{first + int(wrong[0])})"
                )
        first += batch.num_rows


def take_prefixes(
    flat: np.ndarray, lengths: np.ndarray, rows: np.ndarray, limit: int | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The first `limit` ids (one limit, or one per row) of each of `rows` (of `flat` cut
    into `lengths`): the ids one row after the other and the rows' lengths.

        out[e_{k-1} + j] = flat[start(rows_k) + j] for j < n_k = min(lengths[rows_k], limit_k),
        e_k = n_1 + ... + n_k
    """
    starts = (np.cumsum(lengths) - lengths)[rows]
    taken = np.minimum(lengths[rows], limit)
    ends = np.cumsum(taken)
    total = int(ends[-1]) if len(ends) else 0
    gather = np.repeat(starts - (ends - taken), taken) + np.arange(total)
    return flat[gather], taken


_JSON_KINDS = ((bool, "true or false"), (dict, "an object"), (list, "an array"), (str, "a string"))


def _json_kind(value: Any) -> str:
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    kind = next((what for type_, what in _JSON_KINDS if isinstance(value, type_)), None)
    return kind or "a number"


def _field(container: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """container[key], checked to be of JSON type `kind`; DamagedEntry naming `where`
    (a dotted name in meta.json) when it is missing or of another type."""
    if key not in container:
        raise DamagedEntry(f"meta.json lacks {where}")
    value = container[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        wanted = "a number" if kind is int else _json_kind(kind())
        raise DamagedEntry(f"meta.json's {where} is {_json_kind(value)}, not {wanted}")
    return value


def _read_meta(folder: Path) -> dict[str, Any]:
    """meta.json of an entry, checked to describe one of this layout (every field of the
    type it has); DamagedEntry if not. A meta.json that is no file is never opened."""
    path = folder / "meta.json"
    try:
        kind = special_file_kind(path.stat().st_mode)
        if kind is not None:
            raise DamagedEntry(f"meta.json is {kind}, not a file")
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DamagedEntry("meta.json is missing") from None
    except NotADirectoryError:
        raise DamagedEntry("it is a file, not a folder") from None
    except PermissionError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        raise DamagedEntry(f"meta.json is not valid JSON ({error})") from None
    if not isinstance(meta, dict):
        raise DamagedEntry(f"meta.json holds {_json_kind(meta)}, not a JSON object")
    version = meta.get("version")
    if version != PREPARED_VERSION:
        raise DamagedEntry(f"meta.json is of layout {version!r}, not {PREPARED_VERSION}")
    splits = _field(meta, "splits", list, "splits")
    files, stats = _field(meta, "files", dict, "files"), _field(meta, "stats", dict, "stats")
    for name in splits:
        if not isinstance(name, str):
            raise DamagedEntry(f"meta.json's splits holds {_json_kind(name)}, not a name")
        facts = _field(files, name, dict, f"files.{name}")
        counts = _field(stats, name, dict, f"stats.{name}")
        for key in STAT_KEYS:
            _field(counts, key, int, f"stats.{name}.{key}")
        for key in ("rows", "batches", "bytes"):
            _field(facts, key, int, f"files.{name}.{key}")
        _field(facts, "blake2b", str, f"files.{name}.blake2b")
        for key in ("src_ids", "tgt_ids"):
            facts.setdefault(key, "missing")  # compared with the ids found: never equal
    _field(meta, "tokenizers", dict, "tokenizers")
    _field(meta, "tokenizer_digests", dict, "tokenizer_digests")
    record = _field(meta, "built_by", dict, "built_by")
    _field(record, "tokenizers", object, "built_by.tokenizers")
    return meta


def check_entry(folder: Path, verify: bool = True) -> str | None:
    """What is wrong with the cache entry at `folder` (every check of `_map_entry`, the
    checksums and the encoding with `verify`), None when nothing is; the entry is left as it
    is."""
    try:
        _map_entry(folder, verify, expected=None)
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
    """The layout version meta.json names, None when it cannot be read (a meta.json that is
    no regular file is never opened: a named pipe would block)."""
    path = folder / "meta.json"
    try:
        if special_file_kind(path.stat().st_mode) is not None:
            return None
        return json.loads(path.read_text(encoding="utf-8")).get("version")
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
