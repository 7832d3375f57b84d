"""From a `DataConfig` to encoded, length-filtered splits and their tokenizers: `prepare_data`.

Local and hub data are encoded once into the cache (data/cache.py), a chunk at a time, and read
from its memory-mapped files on every run; generated tasks and given pairs stay in memory.
"""

import functools
import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from attnseq.config.choices import DataSource, TaskType, TokenizerKind
from attnseq.config.schema import DataConfig
from attnseq.data.batching import Example
from attnseq.data.cache import (
    STAT_KEYS,
    EncodedChunk,
    entry_holds,
    entry_record,
    new_entry,
    open_entry,
    record_key,
    remove_stale_builds,
    take_prefixes,
)
from attnseq.data.file_readers import Pairs, ParallelStream
from attnseq.data.locations import checked_cache_folder
from attnseq.data.sentencepiece_tokenizer import train_sentencepiece
from attnseq.data.sources import load_splits, split_streams
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.data.workers import encoded_chunks
from attnseq.errors import UserError

log = logging.getLogger("attnseq")

TRAIN = "train"


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

    record = None if cfg.source is DataSource.generated else entry_record(cfg, tokenizers, wanted)
    if record is not None:
        prepared = checked_cache_folder("prepared")
        remove_stale_builds(prepared)
        cached = _open(prepared / record_key(record), cfg.verify, expected=record)
        if cached is None and tokenizers is not None:
            cached = _load_trained_entry(cfg, tokenizers, wanted)
        if cached is not None:
            return cached

    to_load = wanted
    if tokenizers is None and wanted is not None and TRAIN not in wanted:
        to_load = [*wanted, TRAIN]  # the tokenizers are trained on train
    if record is None:
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
    folder = checked_cache_folder("prepared") / record_key(record)
    chosen_streams = streams if wanted is None else {name: streams[name] for name in wanted}
    _write_cached(folder, cfg, chosen_streams, tokenizers, record)
    mapped = _open(folder, cfg.verify, on_damage="raise", expected=record)
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
    for splits in (None, wanted) if wanted is not None else (None,):
        record = entry_record(cfg, None, splits)
        folder = checked_cache_folder("prepared") / record_key(record)
        if not entry_holds(folder, tokenizers, wanted):
            continue
        data = _open(folder, cfg.verify, expected=record)
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
    return _open(folder, verify=False, on_damage="skip")


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


def _write_cached(
    folder: Path,
    cfg: DataConfig,
    splits: dict[str, Iterable[tuple[str, str]]],
    tokenizers: TokenizerPair,
    record: dict[str, Any],
) -> None:
    """Encode every split into the new cache entry `folder` a chunk at a time (read, encoded
    by `encoded_chunks`, written), so memory holds one chunk, never a split; the count checks
    run before the entry is kept; `record` is what built it (`entry_record`)."""
    with new_entry(folder, tokenizers, record) as entry:
        for name, pairs in splits.items():
            encode = functools.partial(encode_chunk, name, tokenizers=tokenizers, cfg=cfg)
            chunks = encoded_chunks(name, pairs, encode, cfg.prepare_workers)
            log_stats(cfg, name, entry.write_split(name, chunks))
        _check_counts(cfg, entry.stats)


def _open(
    folder: Path,
    verify: bool,
    on_damage: Literal["move", "skip", "raise"] = "move",
    expected: dict[str, Any] | None = None,
) -> PreparedData | None:
    """The prepared data of the cache entry at `folder` (`open_entry`, which says what
    `verify`, `on_damage` and `expected` do), None when there is none."""
    entry = open_entry(folder, verify, on_damage, expected)
    if entry is None:
        return None
    for name, stats in entry.stats.items():
        log_stats_cached(name, stats)
    splits = entry.splits
    return PreparedData(
        entry.tokenizers,
        pairs={name: split.pairs for name, split in splits.items()},
        examples={name: split.examples for name, split in splits.items()},
        stats=entry.stats,
        positions={name: split.positions for name, split in splits.items()},
        cache_folder=entry.folder,
    )


def encode_chunk(
    name: str,
    sources: Sequence[str],
    targets: Sequence[str],
    tokenizers: TokenizerPair,
    cfg: DataConfig,
) -> EncodedChunk:
    """Encode the pairs (sources[i], targets[i]) of split `name` and apply the length rules to
    the arrays of lengths, for every pair at once (lengths in tokens, without BOS/EOS):

    | split       | empty source or target | source > max_src_len        | target > max_tgt_len |
    |-------------|------------------------|-----------------------------|----------------------|
    | train       | dropped                | translation: dropped;       | dropped              |
    |             |                        | summarization: truncated    |                      |
    | valid, test | kept, not scored       | truncated                   | ids truncated (loss) |

    Evaluation splits keep every line (hypothesis files stay aligned with the input) and the
    full reference text; only the ids are cut, to the model's positions.
    """
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
    src_ids, src_kept = take_prefixes(src_flat, src_lengths, kept, cfg.max_src_len)
    tgt_ids, tgt_kept = take_prefixes(tgt_flat, tgt_lengths, kept, cfg.max_tgt_len)
    return EncodedChunk(kept, src_ids, src_kept, tgt_ids, tgt_kept, stats)


def encode_split(
    name: str, pairs: Pairs, tokenizers: TokenizerPair, cfg: DataConfig
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
