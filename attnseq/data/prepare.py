"""From a `DataConfig` to encoded, length-filtered splits and their tokenizers: `prepare_data`.

Steps, in order:

1. Text pairs of each split (`sources.load_splits`, or pairs the caller gives).
2. Tokenizers: the given ones, or trained on the training split (char/word through
   `train_tokenizer`; sentencepiece through `train_sentencepiece`, one joint model for both
   sides when `data.spm_joint`, otherwise one per side).
3. Encoding and the length rules (below): what each split does with empty
   examples and with examples over data.max_src_len/max_tgt_len, and the counts it reports
   (`PreparedData.stats`).
4. A cache: for local and hub data the result (tokenizers included) is written as Arrow IPC
   streams (`splits/NAME.arrow`, one per split, plus meta.json) under
   `cache_root()/prepared/<key>/`, where the key hashes the data files' identity (resolved
   path, size, modification time of every shard; for the hub: name, config and split names),
   the data settings that change the result, the requested splits and the given tokenizers'
   state. Preparation streams: local parallel files are read as streams
   (`sources.split_streams`), the tokenizers train on the streamed training texts
   (sentencepiece on its sample of `data.spm_input_sentence_size` of them) and each split is
   read, encoded and written `ENCODE_CHUNK` pairs at a time, so no list of a corpus is ever
   built. Training, validation and evaluation then read the splits from the memory-mapped
   files (data/mapped_split.py), on the first run as on every later one; a second run with
   the same key maps them instead of reading, training and encoding again. Generated tasks
   are rebuilt from the seed in well under a second and are not cached.

The cache checks itself. meta.json records, for every split file, its rows, record batches,
byte size, BLAKE2b checksum (computed once, right after the file is written) and the range of
its token ids. Every run that maps an entry compares the sizes before mapping, then the rows,
the batches and the ids' range (one vectorised pass over the ids, not the texts) with meta.json
and the tokenizers' vocabularies; with `data.verify` (or `attnseq doctor --verify-cache`) the
checksums as well, which reads every byte. An entry that fails a check (a file cut short, a
broken meta.json, ids outside the vocabulary) is renamed `<key>.damaged-<time>-<pid>` and
prepared again, with one warning saying why; the data that was mapped is never read. Entries
are written once: built in `<key>.tmp-<pid>@<host>.<random>`, their files made read-only
(0444 less the umask's bits), renamed into place. A build whose process is gone (killed, the
machine restarted) is removed by the next preparation on that host. A file changed while a
run reads it stops the run with one line (data/mapped_split.py).

Encoding workers (`_encoded_chunks`) end with their parent (Linux's parent-death signal,
elsewhere a thread that watches the parent), keep SIGTERM's default action and leave SIGINT
(which a terminal sends to the whole process group) to the parent, which stops them. A
worker that dies (the kernel's out-of-memory killer) is one UserError naming
`data.prepare_workers`; a full disk or a read-only cache folder is one `OutputError`, and
the unfinished build is removed.

Encoding a split and its length rules (lengths in tokens, without BOS/EOS):

| split       | empty source or target | source > max_src_len        | target > max_tgt_len |
|-------------|------------------------|-----------------------------|----------------------|
| train       | dropped                | translation: dropped;       | dropped              |
|             |                        | summarization: truncated    |                      |
| valid, test | kept, not scored       | truncated                   | ids truncated (loss) |

Empty examples (no source or no target tokens) follow one rule in every split: the model
never learns from them and they never count in a score. Training drops them (counted as
`dropped_empty`); evaluation splits keep their line, so hypothesis files stay line-aligned
with the input (an empty source gets the empty hypothesis, a non-empty source is still
translated), but leave them out of the loss and the metrics (counted as `skipped_empty`,
which evaluation reports as `SPLIT/skipped_empty` in its metrics). A split with no example
left to train on or to score is a UserError.

Evaluation splits keep every example and its full reference *text* (what metrics compare
with), so scores are over the whole official split but its empty examples; only the ids are
cut, which keeps sequences within the model's positions. Every split's counts are logged
(logger "attnseq") and returned in `PreparedData.stats`.
"""

import collections
import contextlib
import ctypes
import errno
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from attnseq.config.choices import DataSource, TaskType, TokenizerKind
from attnseq.config.schema import DataConfig
from attnseq.data.batching import Example
from attnseq.data.file_readers import Pairs, ParallelStream
from attnseq.data.locations import cache_root
from attnseq.data.mapped_split import MappedSplit
from attnseq.data.sentencepiece_tokenizer import train_sentencepiece
from attnseq.data.sources import (
    EVAL_SPLITS,
    HOLDOUT_FRACTION,
    HOLDOUT_SALT,
    load_splits,
    split_files,
    split_streams,
)
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.errors import OutputError, UserError
from attnseq.io.atomic import current_umask
from attnseq.io.user_paths import fixable_write_error

log = logging.getLogger("attnseq")

TRAIN = "train"
STAT_KEYS = ("total", "kept", "dropped_empty", "skipped_empty", "dropped_too_long", "truncated")

PREPARED_VERSION = 5  # bump when the cached layout or the rules above change

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


@dataclass
class PreparedData:
    """Everything training and evaluation need from the data.

    pairs: {split: text pairs of the kept examples}, aligned with `examples` (evaluation
        splits keep every example, so their target texts are the full references).
    examples: {split: (source ids, target ids)} without BOS/EOS, after the length rules.
    stats: {split: {"total", "kept", "dropped_empty", "skipped_empty", "dropped_too_long",
        "truncated"}}.
    positions: {split: the position of each kept example among the split's loaded pairs}
        (what lines up per-pair files such as data.alignments with `examples`).
    cache_folder: the Arrow cache entry the splits are read from, None when they are in memory
        (generated tasks, given pairs).

    Read from the cache, `pairs`, `examples` and `positions` are views of the memory-mapped
    Arrow files (data/mapped_split.py): sequences that read a row when it is asked for;
    otherwise they are lists.
    """

    tokenizers: TokenizerPair
    pairs: dict[str, Sequence[tuple[str, str]]]
    examples: dict[str, Sequence[Example]]
    stats: dict[str, dict[str, int]]
    positions: dict[str, Sequence[int]] = field(default_factory=dict)
    cache_folder: Path | None = None


def prepare_data(
    cfg: DataConfig,
    seed: int,
    *,
    tokenizers: TokenizerPair | None = None,
    splits: Sequence[str] | None = None,
    pairs: dict[str, Pairs] | None = None,
) -> PreparedData:
    """Load (or take `pairs`), train tokenizers if none are given, encode and filter.

    Args:
        cfg: the data settings.
        seed: seed of generated tasks (real data does not depend on it).
        tokenizers: use these instead of training (evaluating a checkpoint).
        splits: only these splits (default: train, valid, test and any other in data.splits).
        pairs: text pairs to use instead of loading (e.g. `load_pairs_from_path`); needs a
            "train" entry when no tokenizers are given. Not cached.
    """
    wanted = list(splits) if splits is not None else None
    if pairs is not None:
        if wanted is not None:
            missing = [name for name in wanted if name not in pairs]
            if missing:
                raise UserError(f"no pairs given for split(s) {', '.join(missing)}")
        chosen = pairs if wanted is None else {name: pairs[name] for name in wanted}
        return _build(cfg, chosen, tokenizers, pairs.get(TRAIN))

    key = None if cfg.source is DataSource.generated else _cache_key(cfg, tokenizers, wanted)
    if key is not None:
        remove_stale_builds(cache_root() / "prepared")
        cached = _open_entry(cache_root() / "prepared" / key, cfg.verify)
        if cached is None and tokenizers is not None:
            cached = _load_trained_entry(cfg, tokenizers, wanted)
        if cached is not None:
            return cached

    to_load = wanted
    if tokenizers is None and wanted is not None and TRAIN not in wanted:
        to_load = [*wanted, TRAIN]  # the tokenizers are trained on train
    if key is None:
        loaded = load_splits(cfg, seed, to_load)
        chosen = loaded if wanted is None else {name: loaded[name] for name in wanted}
        return _build(cfg, chosen, tokenizers, loaded.get(TRAIN))
    streams = split_streams(cfg, seed, to_load)
    if tokenizers is None:
        if next(iter(streams[TRAIN]), None) is None:
            raise UserError(
                "no training pairs to train the tokenizers on (the train split is empty)"
            )
        tokenizers = train_tokenizers(cfg, streams[TRAIN])
    folder = cache_root() / "prepared" / key
    chosen_streams = streams if wanted is None else {name: streams[name] for name in wanted}
    _write_cached(folder, cfg, chosen_streams, tokenizers)
    mapped = _open_entry(folder, cfg.verify, on_damage="raise")
    if mapped is None:
        raise UserError(
            f"the prepared data just written to {folder} is gone: is another "
            "process removing entries from the cache?"
        )
    mapped.tokenizers = tokenizers  # the very objects given or trained
    return mapped


def _load_trained_entry(
    cfg: DataConfig, tokenizers: TokenizerPair, wanted: list[str] | None
) -> PreparedData | None:
    """The entry of the run that trained `tokenizers` on these files (a resumed run, a
    checkpoint evaluated on its own data): the same settings and files, tokenizers trained
    rather than given, the very same tokenizers, every wanted split. Encoding millions of
    pairs again would take minutes and a second copy of the cache."""
    state = json.loads(json.dumps(tokenizers.state()))  # as meta.json holds it
    for splits in (None, wanted) if wanted is not None else (None,):
        folder = cache_root() / "prepared" / _cache_key(cfg, None, splits)
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if meta.get("tokenizers") != state or not set(wanted or meta["splits"]) <= set(
            meta["splits"]
        ):
            continue
        data = _open_entry(folder, cfg.verify)
        if data is None:
            continue
        for name in set(data.examples) - set(wanted or data.examples):
            for table in (data.pairs, data.examples, data.positions, data.stats):
                table.pop(name, None)
        data.tokenizers = tokenizers
        return data
    return None


def load_prepared(folder: Path) -> PreparedData | None:
    """The prepared data of a cache entry (`PreparedData.cache_folder`), its splits mapped
    after the cheap checks; None when the entry is missing or damaged (left where it is: the
    process that prepared it decides). What the other ranks of a data-parallel run read, so
    that every rank on a machine maps the same files."""
    return _open_entry(folder, verify=False, on_damage="skip")


def train_tokenizers(cfg: DataConfig, train_pairs: Iterable[tuple[str, str]]) -> TokenizerPair:
    """Tokenizers of kind `data.tokenizer` trained on the training pairs (each side read as a
    stream of texts: sentencepiece keeps only its sample of them; a streamed corpus reads only
    that side's files)."""
    src_texts, tgt_texts = _side(train_pairs, 0), _side(train_pairs, 1)
    try:
        if cfg.tokenizer is TokenizerKind.sentencepiece:
            options: dict[str, Any] = {
                "vocab_size": cfg.spm_vocab_size,
                "model_type": cfg.spm_model_type.value,
                "character_coverage": cfg.spm_character_coverage,
                "input_sentence_size": cfg.spm_input_sentence_size,
            }
            if cfg.spm_joint:
                joint = train_sentencepiece(_Joined(src_texts, tgt_texts), **options)
                return TokenizerPair(joint, joint)
            return TokenizerPair(
                train_sentencepiece(src_texts, **options),
                train_sentencepiece(tgt_texts, **options),
            )
        kind = cfg.tokenizer.value
        return TokenizerPair(train_tokenizer(kind, src_texts), train_tokenizer(kind, tgt_texts))
    except ValueError as error:
        raise UserError(f"cannot train data.tokenizer={cfg.tokenizer.value}: {error}") from None


def _side(pairs: Iterable[tuple[str, str]], side: int) -> Iterable[str]:
    return pairs.side(side) if isinstance(pairs, ParallelStream) else _Side(pairs, side)


class _Side:
    """The source (0) or target (1) texts of pairs, read anew on every iteration."""

    def __init__(self, pairs: Iterable[tuple[str, str]], side: int) -> None:
        self.pairs, self.side = pairs, side

    def __iter__(self) -> Iterator[str]:
        return (pair[self.side] for pair in self.pairs)


class _Joined:
    """Two text streams one after the other, read anew on every iteration."""

    def __init__(self, first: Iterable[str], second: Iterable[str]) -> None:
        self.first, self.second = first, second

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self.first, self.second)


def _build(
    cfg: DataConfig,
    pairs: dict[str, Pairs],
    tokenizers: TokenizerPair | None,
    train_pairs: Pairs | None,
) -> PreparedData:
    if tokenizers is None:
        if not train_pairs:
            raise UserError(
                "no training pairs to train the tokenizers on (the train split is empty)"
            )
        tokenizers = train_tokenizers(cfg, train_pairs)
    data = PreparedData(tokenizers, {}, {}, {})
    for name, split_pairs in pairs.items():
        kept, examples, stats, positions = encode_split(name, split_pairs, tokenizers, cfg)
        data.pairs[name], data.examples[name], data.stats[name] = kept, examples, stats
        data.positions[name] = positions
        log_stats(cfg, name, stats)
    _check_counts(cfg, data.stats)
    return data


def _check_counts(cfg: DataConfig, counts: dict[str, dict[str, int]]) -> None:
    """A UserError when training has no example left or a split has nothing to score."""
    if TRAIN in counts and counts[TRAIN]["kept"] == 0:
        raise UserError(
            f"no training examples left: all {counts[TRAIN]['total']} were empty or longer "
            f"than data.max_src_len={cfg.max_src_len} / data.max_tgt_len={cfg.max_tgt_len}"
        )
    for name, stats in counts.items():
        if name != TRAIN and stats["kept"] == stats["skipped_empty"]:
            raise UserError(
                f"nothing to evaluate in the {name} split: "
                + (
                    f"all {stats['total']} examples have an empty source or target"
                    if stats["total"]
                    else "it holds no examples"
                )
            )


# ------------------------------------------------------------------------------ caching
def _cache_key(cfg: DataConfig, tokenizers: TokenizerPair | None, wanted: list[str] | None) -> str:
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


ENCODE_CHUNK = 50_000  # pairs read, encoded and written at a time
_SCHEMA = pa.schema(
    [
        ("src", pa.string()),
        ("tgt", pa.string()),
        ("src_ids", pa.list_(pa.int32())),
        ("tgt_ids", pa.list_(pa.int32())),
        ("position", pa.int64()),
    ]
)


def _write_cached(
    folder: Path,
    cfg: DataConfig,
    splits: dict[str, Iterable[tuple[str, str]]],
    tokenizers: TokenizerPair,
) -> None:
    """Encode every split chunk by chunk into `folder` (splits/NAME.arrow, Arrow IPC streams,
    plus meta.json), atomically (built aside, renamed): `ENCODE_CHUNK` pairs at a time are
    read, encoded (`_encoded_chunks`: worker processes for long splits) and written, so memory
    holds one chunk, never a split. The count checks run before the entry is kept, and its
    files are read-only once it is. A full disk or a read-only cache folder is an
    `OutputError` (the unfinished build removed)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(dir=folder.parent, prefix=_build_prefix(folder.name)))
    except OSError as error:
        raise _cache_write_error(folder.parent, error) from None
    try:
        os.chmod(building, 0o777 & ~current_umask())  # mkdtemp's folder is private
        (building / "splits").mkdir()
        counts: dict[str, dict[str, int]] = {}
        files: dict[str, dict[str, Any]] = {}
        for name, pairs in splits.items():
            path = building / "splits" / f"{name}.arrow"
            counts[name], files[name] = _write_split(path, name, pairs, tokenizers, cfg)
        _check_counts(cfg, counts)
        meta = {
            "version": PREPARED_VERSION,
            "splits": list(splits),
            "stats": counts,
            "files": files,
            "tokenizers": tokenizers.state(),
        }
        (building / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        # Written once: read-only, readable as far as the umask lets the user's files be.
        for written in [*(building / "splits").iterdir(), building / "meta.json"]:
            os.chmod(written, 0o444 & ~current_umask())
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


def _write_split(
    path: Path,
    name: str,
    pairs: Iterable[tuple[str, str]],
    tokenizers: TokenizerPair,
    cfg: DataConfig,
) -> tuple[dict[str, int], dict[str, Any]]:
    """One split, encoded a chunk at a time into the Arrow stream at `path`: its counts and
    what meta.json records of the file (`_file_facts`)."""
    counts = dict.fromkeys(STAT_KEYS, 0)
    loaded = 0  # pairs of the split read so far: the position of the chunk's first pair
    batches = 0
    ranges: dict[str, list[int] | None] = {"src_ids": None, "tgt_ids": None}
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, _SCHEMA) as writer:
        for (sources, targets), encoded in _encoded_chunks(name, pairs, tokenizers, cfg):
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
    log_stats(cfg, name, counts)
    facts = {"rows": counts["kept"], "batches": batches, **ranges, **_file_facts(path)}
    return counts, facts


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


Chunk = tuple[list[str], list[str]]  # the sources and the targets of consecutive pairs


def _chunks(pairs: Iterable[tuple[str, str]]) -> Iterator[Chunk]:
    """The pairs `ENCODE_CHUNK` at a time (a streamed corpus: read a block of lines at a
    time, fewer at the end of a shard)."""
    if isinstance(pairs, ParallelStream):
        yield from pairs.blocks(ENCODE_CHUNK)
        return
    stream = iter(pairs)
    while chunk := list(itertools.islice(stream, ENCODE_CHUNK)):
        yield [src for src, _ in chunk], [tgt for _, tgt in chunk]


def _encoded_chunks(
    name: str, pairs: Iterable[tuple[str, str]], tokenizers: TokenizerPair, cfg: DataConfig
) -> Iterator[tuple[Chunk, "EncodedChunk"]]:
    """The split's chunks (`_chunks`), in order, each with its `encode_chunk`.

    A split of one chunk (every validation and test set) is encoded here. A longer one is
    encoded by `data.prepare_workers` worker processes (default: one per core) while this
    process reads the next chunks and writes the finished ones: the encoding is mostly Python
    (a dictionary lookup per word), so threads would share one core. Workers are forked (the
    tokenizers and settings are already in memory, nothing is imported again) and each keeps
    its own known words; a chunk's ids do not depend on which worker encodes it, so the result
    is the same as in one process.

    The workers end with this process (`_worker_started`); when the split is left early (an
    error, a stop signal) they are stopped at once rather than finishing their chunks.
    """
    chunks = _chunks(pairs)
    workers = cfg.prepare_workers or os.cpu_count() or 1
    head = list(itertools.islice(chunks, 2))
    if len(head) < 2 or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for chunk in itertools.chain(head, chunks):
            yield chunk, encode_chunk(name, *chunk, tokenizers, cfg)
        return
    fork = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        workers, mp_context=fork, initializer=_worker_started, initargs=(os.getpid(),)
    )
    # The worker processes, for their exit status: the executor forgets a dead one.
    processes: dict[int, Any] = {}
    finished = False
    try:
        pending: collections.deque[tuple[Chunk, Future[EncodedChunk]]] = collections.deque()
        for chunk in itertools.chain(head, chunks):
            with _stop_signals_blocked():  # the workers it may start inherit the block
                future = pool.submit(encode_chunk, name, *chunk, tokenizers, cfg)
            pending.append((chunk, future))
            processes.update(getattr(pool, "_processes", None) or {})
            if len(pending) > workers:  # one chunk waiting per worker, the rest written
                done, encoded = pending.popleft()
                yield done, encoded.result()
        while pending:
            done, encoded = pending.popleft()
            yield done, encoded.result()
        finished = True
    except BrokenProcessPool:
        # Once the pool has shut down, every worker's exit status is known.
        pool.shutdown(wait=True, cancel_futures=True)
        raise _worker_died(name, workers, processes) from None
    finally:
        if not finished:
            for process in processes.values():
                with contextlib.suppress(OSError, ValueError):
                    process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _worker_died(name: str, workers: int, processes: dict[int, Any]) -> UserError:
    """The one-line error of a dead encoding worker: how it ended and what to lower."""
    codes = [process.exitcode for process in list(processes.values())]
    # The pool stops the other workers with SIGTERM once one has died: name another cause.
    code = next((c for c in codes if c not in (None, 0, -signal.SIGTERM)), None)
    if code is None:
        code = next((c for c in codes if c not in (None, 0)), None)
    if code == -signal.SIGKILL:
        how = "was killed (SIGKILL), most likely by the kernel's out-of-memory killer"
    elif code is not None and code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
    elif code is not None:
        how = f"exited with status {code}"
    else:
        how = "died"
    return UserError(
        f"a data preparation worker {how} while encoding the {name} split; each of the "
        f"{workers} workers holds the tokenizers and {ENCODE_CHUNK:,} pairs at a time: "
        f"lower data.prepare_workers (now {workers}) or free memory, and run again"
    )


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent thread ends
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered once the block ends) while workers may be
    started: a worker starts with this process's handlers, and would act on a signal with
    them until `_worker_started` has replaced them; the block keeps the signal pending until
    then. The pool's threads started meanwhile keep the block, so the main thread gets the
    signals."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_started(parent: int) -> None:
    """In each encoding worker, before any chunk: SIGTERM's default action (the handlers it
    inherits from a training process would raise an exception in it instead), SIGINT
    ignored (a terminal's Ctrl-C reaches the whole process group: the parent stops its
    workers), and death with the parent, also by SIGKILL."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held back since the fork (a SIGTERM now ends it)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    else:  # no parent-death signal: a thread that watches for being adopted
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def _list_column(flat: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
    """An Arrow list<int32> column from every row's values one after the other and the rows'
    lengths (no Python list of ids)."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int32()))


class DamagedEntry(Exception):
    """A cache entry that fails a check; the message says which and how."""


def _open_entry(
    folder: Path, verify: bool, on_damage: Literal["move", "skip", "raise"] = "move"
) -> PreparedData | None:
    """The cached entry, its splits memory-mapped (data/mapped_split.py) once its checks
    passed (`_map_entry`; `verify`: the checksums too), or None when there is none.

    A damaged entry is, by `on_damage`: moved aside (None: prepared again), left where it is
    (None), or a UserError (an entry this process has just written)."""
    try:
        identity = folder.stat().st_ino
    except FileNotFoundError:
        return None
    try:
        data = _map_entry(folder, verify)
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
    for name, stats in data.stats.items():
        log_stats_cached(name, stats)
    return data


def _moved_aside(folder: Path, identity: int, reason: str, verify: bool) -> PreparedData | None:
    """Rename a damaged entry to `<key>.damaged-<time>-<pid>` (kept for a look, never read
    again), saying so in one line; None: the data is prepared again. When another process
    replaced the entry meanwhile, that one is opened instead."""
    aside = folder.with_name(
        f"{folder.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    )
    try:
        if folder.stat().st_ino != identity:  # a fresh entry took its place: use it
            return _open_entry(folder, verify, on_damage="skip")
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


def _map_entry(folder: Path, verify: bool) -> PreparedData:
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
    data = PreparedData(tokenizers, {}, {}, {})
    data.cache_folder = folder
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
        data.pairs[name], data.examples[name] = split.pairs, split.examples
        data.positions[name] = split.positions
        data.stats[name] = {key: int(value) for key, value in meta["stats"][name].items()}
    return data


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
    """The unfinished builds under `prepared` of processes on this host that no longer run
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


@dataclass
class EncodedChunk:
    """Pairs after encoding and the length rules of the module docstring.

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


def encode_chunk(
    name: str,
    sources: Sequence[str],
    targets: Sequence[str],
    tokenizers: "TokenizerPair",
    cfg: DataConfig,
) -> EncodedChunk:
    """Encode the pairs (sources[i], targets[i]) of split `name` and apply the length rules
    (module docstring) to the arrays of lengths, for every pair at once."""
    src_flat, src_lengths = tokenizers.src.encode_flat(sources)
    tgt_flat, tgt_lengths = tokenizers.tgt.encode_flat(targets)
    empty = (src_lengths == 0) | (tgt_lengths == 0)
    src_long, tgt_long = src_lengths > cfg.max_src_len, tgt_lengths > cfg.max_tgt_len
    stats = dict.fromkeys(STAT_KEYS, 0)
    stats["total"] = len(sources)
    if name == TRAIN:
        summarization = cfg.task is TaskType.summarization
        too_long = ~empty & (tgt_long | (src_long & (not summarization)))
        keep = ~empty & ~too_long
        src_cut = keep & src_long  # summarization: the lead of a document carries most of it
        tgt_cut = np.zeros_like(keep)
        stats["dropped_empty"] = int(empty.sum())
        stats["dropped_too_long"] = int(too_long.sum())
    else:
        keep = np.ones(len(sources), bool)
        src_cut, tgt_cut = src_long, tgt_long  # the reference text stays whole
        stats["skipped_empty"] = int(empty.sum())
    stats["truncated"] = int((src_cut | tgt_cut).sum())
    kept = np.flatnonzero(keep)
    stats["kept"] = len(kept)
    src_ids, src_kept = _take(src_flat, src_lengths, kept, cfg.max_src_len)
    tgt_ids, tgt_kept = _take(tgt_flat, tgt_lengths, kept, cfg.max_tgt_len)
    return EncodedChunk(kept, src_ids, src_kept, tgt_ids, tgt_kept, stats)


def _take(
    flat: np.ndarray, lengths: np.ndarray, rows: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first `limit` ids of each of `rows` (of `flat` cut into `lengths`): the ids one row
    after the other and the rows' lengths.

        out[e_{k-1} + j] = flat[start(rows_k) + j] for j < n_k = min(lengths[rows_k], limit),
        e_k = n_1 + ... + n_k
    """
    starts = (np.cumsum(lengths) - lengths)[rows]
    taken = np.minimum(lengths[rows], limit)
    ends = np.cumsum(taken)
    total = int(ends[-1]) if len(ends) else 0
    gather = np.repeat(starts - (ends - taken), taken) + np.arange(total)
    return flat[gather], taken


def encode_split(
    name: str, pairs: Pairs, tokenizers: "TokenizerPair", cfg: DataConfig
) -> tuple[Pairs, list[Example], dict[str, int], list[int]]:
    """`encode_chunk` as lists: (kept text pairs, their encoded examples, counts, the position
    of each kept pair in `pairs`), for splits held in memory."""
    sources, targets = [src for src, _ in pairs], [tgt for _, tgt in pairs]
    encoded = encode_chunk(name, sources, targets, tokenizers, cfg)
    kept = encoded.kept.tolist()
    src_ids, tgt_ids = encoded.src_ids.tolist(), encoded.tgt_ids.tolist()
    src_ends, tgt_ends = np.cumsum(encoded.src_lengths), np.cumsum(encoded.tgt_lengths)
    examples = [
        (src_ids[src_end - src_length : src_end], tgt_ids[tgt_end - tgt_length : tgt_end])
        for src_end, src_length, tgt_end, tgt_length in zip(
            src_ends.tolist(),
            encoded.src_lengths.tolist(),
            tgt_ends.tolist(),
            encoded.tgt_lengths.tolist(),
            strict=True,
        )
    ]
    return [pairs[position] for position in kept], examples, encoded.stats, kept


def log_stats(cfg: DataConfig, name: str, stats: dict[str, int]) -> None:
    dropped = stats["dropped_empty"] + stats["dropped_too_long"]
    message = (
        f"data {cfg.name}/{name}: {stats['total']} pairs, {stats['kept']} kept; dropped "
        f"{stats['dropped_empty']} empty and {stats['dropped_too_long']} over "
        f"max_src_len={cfg.max_src_len}/max_tgt_len={cfg.max_tgt_len}; "
        f"{stats['truncated']} truncated" + _skipped_note(stats)
    )
    # A tenth of a split lost, cut or unscored is worth a look at the data and the limits.
    lost = dropped + stats["truncated"] + stats["skipped_empty"]
    worrying = stats["total"] and lost * 10 > stats["total"]
    log.log(logging.WARNING if worrying else logging.INFO, message)


def log_stats_cached(name: str, stats: dict[str, int]) -> None:
    log.info(
        "data %s (cached): %d pairs, %d kept, %d empty and %d too long dropped, %d truncated%s",
        name,
        stats["total"],
        stats["kept"],
        stats["dropped_empty"],
        stats["dropped_too_long"],
        stats["truncated"],
        _skipped_note(stats),
    )


def _skipped_note(stats: dict[str, int]) -> str:
    skipped = stats["skipped_empty"]
    if not skipped:
        return ""
    return (
        f"; {skipped} with an empty source or target kept as lines but left out of the "
        "loss and metrics"
    )
