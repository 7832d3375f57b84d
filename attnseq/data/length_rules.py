"""Encoding a split and its length rules (lengths in tokens, without BOS/EOS):

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

import logging
from typing import TYPE_CHECKING

from attnseq.config.choices import TaskType
from attnseq.config.schema import DataConfig
from attnseq.data.batching import Example
from attnseq.data.file_readers import Pairs
from attnseq.data.sentencepiece_tokenizer import SentencePieceTokenizer
from attnseq.data.tokenizers import Tokenizer

if TYPE_CHECKING:
    from attnseq.data.tokenizers import TokenizerPair

log = logging.getLogger("attnseq")

TRAIN = "train"
STAT_KEYS = ("total", "kept", "dropped_empty", "skipped_empty", "dropped_too_long", "truncated")


def encode_split(
    name: str, pairs: Pairs, tokenizers: "TokenizerPair", cfg: DataConfig
) -> tuple[Pairs, list[Example], dict[str, int], list[int]]:
    """Encode one split and apply the length rules of the module docstring.

    Returns (kept text pairs, their encoded examples, counts, the position of each kept pair
    in `pairs`).
    """
    src_ids = _encode_all(tokenizers.src, [src for src, _ in pairs])
    tgt_ids = _encode_all(tokenizers.tgt, [tgt for _, tgt in pairs])
    stats = dict.fromkeys(STAT_KEYS, 0)
    stats["total"] = len(pairs)
    training = name == TRAIN
    summarization = cfg.task is TaskType.summarization
    kept: Pairs = []
    examples: list[Example] = []
    positions: list[int] = []
    for position, (pair, src, tgt) in enumerate(zip(pairs, src_ids, tgt_ids, strict=True)):
        cut = False
        if training:
            if not src or not tgt:
                stats["dropped_empty"] += 1
                continue
            src_too_long = len(src) > cfg.max_src_len
            if len(tgt) > cfg.max_tgt_len or (src_too_long and not summarization):
                stats["dropped_too_long"] += 1
                continue
            if src_too_long:  # summarization: the lead of a document carries most of it
                src, cut = src[: cfg.max_src_len], True
        else:
            stats["skipped_empty"] += not src or not tgt
            if len(src) > cfg.max_src_len:
                src, cut = src[: cfg.max_src_len], True
            if len(tgt) > cfg.max_tgt_len:
                tgt, cut = tgt[: cfg.max_tgt_len], True  # the reference text stays whole
        stats["truncated"] += cut
        kept.append(pair)
        examples.append((src, tgt))
        positions.append(position)
    stats["kept"] = len(kept)
    return kept, examples, stats, positions


def _encode_all(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    if isinstance(tokenizer, SentencePieceTokenizer):
        return tokenizer.encode_batch(texts)  # one call into the library, threaded
    return [tokenizer.encode(text) for text in texts]


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
