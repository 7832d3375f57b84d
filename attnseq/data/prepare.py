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
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

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
from attnseq.errors import UserError
from attnseq.io.atomic import current_umask

log = logging.getLogger("attnseq")

TRAIN = "train"
STAT_KEYS = ("total", "kept", "dropped_empty", "skipped_empty", "dropped_too_long", "truncated")

PREPARED_VERSION = 4  # bump when the cached layout or the rules above change

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
        cached = _load_cached(cache_root() / "prepared" / key)
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
    mapped = load_prepared(folder)
    if mapped is None:
        raise UserError(f"cannot read the prepared data just written to {folder}")
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
        data = _load_cached(folder)
        if data is None:
            continue
        for name in set(data.examples) - set(wanted or data.examples):
            for table in (data.pairs, data.examples, data.positions, data.stats):
                table.pop(name, None)
        data.tokenizers = tokenizers
        return data
    return None


def load_prepared(folder: Path) -> PreparedData | None:
    """The prepared data of a cache entry (`PreparedData.cache_folder`), its splits mapped;
    None when the entry is missing or unreadable. What the other ranks of a data-parallel run
    read, so that every rank on a machine maps the same files."""
    return _load_cached(folder)


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
    holds one chunk, never a split. The count checks run before the entry is kept."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".tmp-"))
    os.chmod(building, 0o777 & ~current_umask())  # mkdtemp's folder is private; the cache is not
    try:
        (building / "splits").mkdir()
        counts = {
            name: _write_split(building / "splits" / f"{name}.arrow", name, pairs, tokenizers, cfg)
            for name, pairs in splits.items()
        }
        _check_counts(cfg, counts)
        meta = {
            "version": PREPARED_VERSION,
            "splits": list(splits),
            "stats": counts,
            "tokenizers": tokenizers.state(),
        }
        (building / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        try:
            os.rename(building, folder)
        except OSError:
            # Another process (a parallel sweep job) finished the same entry first: keep it.
            shutil.rmtree(building, ignore_errors=True)
            return
        log.info("data: tokenized splits cached in %s", folder)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def _write_split(
    path: Path,
    name: str,
    pairs: Iterable[tuple[str, str]],
    tokenizers: TokenizerPair,
    cfg: DataConfig,
) -> dict[str, int]:
    """One split, encoded a chunk at a time into the Arrow stream at `path`; its counts."""
    counts = dict.fromkeys(STAT_KEYS, 0)
    loaded = 0  # pairs of the split read so far: the position of the chunk's first pair
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
            for key in STAT_KEYS:
                counts[key] += encoded.stats[key]
            loaded += len(sources)
    log_stats(cfg, name, counts)
    return counts


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
    encoded by one worker process per core while this process reads the next chunks and
    writes the finished ones: the encoding is mostly Python (a dictionary lookup per word), so
    threads would share one core. Workers are forked (the tokenizers and settings are already
    in memory, nothing is imported again) and each keeps its own known words; a chunk's ids
    do not depend on which worker encodes it, so the result is the same as in one process.
    """
    chunks = _chunks(pairs)
    workers = os.cpu_count() or 1
    head = list(itertools.islice(chunks, 2))
    if len(head) < 2 or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for chunk in itertools.chain(head, chunks):
            yield chunk, encode_chunk(name, *chunk, tokenizers, cfg)
        return
    fork = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers, mp_context=fork) as pool:
        pending: collections.deque[tuple[Chunk, Future[EncodedChunk]]] = collections.deque()
        for chunk in itertools.chain(head, chunks):
            pending.append((chunk, pool.submit(encode_chunk, name, *chunk, tokenizers, cfg)))
            if len(pending) > workers:  # one chunk waiting per worker, the rest written
                done, encoded = pending.popleft()
                yield done, encoded.result()
        while pending:
            done, encoded = pending.popleft()
            yield done, encoded.result()


def _list_column(flat: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
    """An Arrow list<int32> column from every row's values one after the other and the rows'
    lengths (no Python list of ids)."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int32()))


def _load_cached(folder: Path) -> PreparedData | None:
    """The cached entry, its splits memory-mapped (data/mapped_split.py), or None when there is
    none (or it cannot be read: rebuilt then)."""
    meta_file = folder / "meta.json"
    if not meta_file.is_file():
        return None
    from datasets.table import MemoryMappedTable

    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("version") != PREPARED_VERSION:
            raise ValueError(f"layout version {meta.get('version')}, not {PREPARED_VERSION}")
        data = PreparedData(TokenizerPair.from_state(meta["tokenizers"]), {}, {}, {})
        data.cache_folder = folder
        for name in meta["splits"]:
            # The file is mapped (mmap), and the table pickles as its path.
            table = MemoryMappedTable.from_file(str(folder / "splits" / f"{name}.arrow"))
            split = MappedSplit(table)
            data.pairs[name], data.examples[name] = split.pairs, split.examples
            data.positions[name] = split.positions
            data.stats[name] = {key: int(value) for key, value in meta["stats"][name].items()}
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("data: ignoring unreadable cache entry %s (%s)", folder, error)
        return None
    log.info("data: tokenized splits loaded from cache %s", folder)
    for name, stats in data.stats.items():
        log_stats_cached(name, stats)
    return data


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
