"""Where two systems differ (compare-mt: Neubig et al. 2019, NAACL demo): a metric per
source-length bucket with its bootstrap interval, and output/reference length ratios, whole and
per sentence."""

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from attnseq.errors import UserError
from attnseq.evaluation.metrics import sacrebleu_metric
from attnseq.evaluation.significance import (
    CORPUS_METRICS,
    DEFAULT_RESAMPLING,
    Resampling,
    estimate_ci,
    sentence_scores,
)


@dataclass(frozen=True)
class Bucket:
    """Values lo <= v < hi (hi None: no upper bound), and how many items fall in it: source
    lengths and sentences here, training frequencies and reference words in
    word_accuracy.py."""

    lo: int
    hi: int | None
    count: int

    @property
    def label(self) -> str:
        if self.hi is None:
            return f"{self.lo}+"
        return str(self.lo) if self.hi == self.lo + 1 else f"{self.lo}-{self.hi - 1}"


@dataclass(frozen=True)
class BucketScore:
    """A system's metric in one bucket: the score and its 95% bootstrap interval."""

    score: float
    low: float
    high: float


def words(text: str) -> int:
    return len(text.split())


def length_unit(texts: Sequence[str]) -> str:
    """'words', or 'characters' when every text has the same number of words."""
    return "characters" if len({words(text) for text in texts}) <= 1 and texts else "words"


def lengths_in(texts: Sequence[str], unit: str) -> np.ndarray:
    """The length of each text in `unit` ("words" or "characters"), shape (n,)."""
    measure = len if unit == "characters" else words
    return np.array([measure(text) for text in texts], dtype=int)


def default_edges(sources: Sequence[str], unit: str = "words") -> list[int]:
    """Lower edges at the source lengths' quartiles (distinct, sorted; the first is the
    shortest length)."""
    if not sources:
        return [0]
    lengths = lengths_in(sources, unit)
    cuts = np.quantile(lengths, [0.0, 0.25, 0.5, 0.75], method="higher")
    return sorted({int(cut) for cut in cuts})


def check_edges(edges: Sequence[int] | None, name: str = "bucket edges") -> None:
    """UserError unless `edges` (when given) are lengths, >= 0, and increasing: the lower
    edges of buckets; `name`: what the messages call them (a command passes its option)."""
    if edges is None:
        return
    edges = list(edges)
    if any(edge < 0 for edge in edges):
        raise UserError(f"{name}: lengths are >= 0, got {edges}")
    if not edges or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise UserError(f"{name} must be increasing numbers of words, got {edges}")


def make_buckets(
    sources: Sequence[str], edges: Sequence[int] | None = None, unit: str = "words"
) -> list[Bucket]:
    """The buckets of `edges` (increasing lower edges in `unit`, `check_edges`; default
    `default_edges`) with counts."""
    edges = list(edges) if edges is not None else default_edges(sources, unit)
    check_edges(edges)
    lengths = lengths_in(sources, unit).tolist()
    shortest = min(lengths, default=edges[0])
    buckets = []
    for index, lo in enumerate(edges):
        lo = min(lo, shortest) if index == 0 else lo  # the first bucket holds anything shorter
        hi = edges[index + 1] if index + 1 < len(edges) else None
        count = sum(lo <= n and (hi is None or n < hi) for n in lengths)
        buckets.append(Bucket(lo, hi, count))
    return buckets


def bucket_members(sources: Sequence[str], bucket: Bucket, unit: str = "words") -> np.ndarray:
    """Indices of the sentences whose source falls in `bucket`."""
    lengths = lengths_in(sources, unit)
    inside = lengths >= bucket.lo
    if bucket.hi is not None:
        inside &= lengths < bucket.hi
    return np.flatnonzero(inside)


def _statistics(metric: str, hypotheses: Sequence[str], references: Sequence[str]):
    """(per-sentence statistics (n, k), summed statistics -> score)."""
    if metric in CORPUS_METRICS:
        scorer = sacrebleu_metric(metric)
        stats = np.array(
            scorer._extract_corpus_statistics(list(hypotheses), [list(references)]),
            dtype=np.float64,
        )
        return stats, lambda summed: scorer._compute_score_from_stats(list(summed)).score
    values = sentence_scores(metric, hypotheses, references)
    stats = np.stack([values, np.ones_like(values)], axis=1)
    return stats, lambda summed: float(summed[0] / summed[1]) if summed[1] else 0.0


def length_buckets(
    sources: Sequence[str],
    systems: Mapping[str, Sequence[str]],
    references: Sequence[str],
    metric: str,
    edges: Sequence[int] | None = None,
    resampling: Resampling = DEFAULT_RESAMPLING,
    unit: str = "words",
) -> tuple[list[Bucket], dict[str, list[BucketScore]]]:
    """The buckets (lengths in `unit`) and, per system, `metric` in each bucket with its
    interval from `resampling.resamples` seeded draws of the bucket's sentences (sacreBLEU's
    percentile rule, `estimate_ci`); BLEU, chrF and TER from sacreBLEU's statistics of those
    sentences, ROUGE and exact match as means of their sentence scores. An empty bucket scores 0
    with an empty interval at 0."""
    buckets = make_buckets(sources, edges, unit)
    members = [bucket_members(sources, bucket, unit) for bucket in buckets]
    rng = np.random.default_rng(resampling.seed)
    size = resampling.resamples
    draws = [rng.integers(len(m), size=(size, len(m))) if len(m) else None for m in members]
    table: dict[str, list[BucketScore]] = {}
    for name, hypotheses in systems.items():
        stats, score_of = _statistics(metric, hypotheses, references)
        row = []
        for inside, drawn in zip(members, draws, strict=True):
            if drawn is None:
                row.append(BucketScore(0.0, 0.0, 0.0))
                continue
            chosen = stats[inside]
            score = float(score_of(chosen.sum(axis=0)))
            samples = np.array([score_of(chosen[rows].sum(axis=0)) for rows in drawn])
            mean, ci = estimate_ci(samples)
            row.append(BucketScore(score, mean - ci, mean + ci))
        table[name] = row
    return buckets, table


def length_ratio(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sum |output words| / sum |reference words|, as BLEU's brevity penalty sees it (1: as
    long as the references); 0 for no words."""
    total = sum(words(text) for text in references)
    return sum(words(text) for text in hypotheses) / total if total else 0.0


# lower edges of the sentence length-ratio buckets after the first, as compare-mt's sentence
# buckets by length score (its --compare_sentence_buckets with these cutoffs)
RATIO_EDGES: tuple[Fraction, ...] = tuple(Fraction(tenths, 10) for tenths in (8, 9, 10, 11, 12))


def ratio_labels(edges: Sequence[Fraction] = RATIO_EDGES) -> list[str]:
    """The labels of the buckets [lo, hi) of `edges`: "< 0.8", "0.8-0.9", ..., ">= 1.2"."""
    shown = [str(float(edge)) for edge in edges]
    middle = [f"{lo}-{hi}" for lo, hi in zip(shown, shown[1:], strict=False)]
    return [f"< {shown[0]}", *middle, f">= {shown[-1]}"]


def sentence_ratio(hypothesis: str, reference: str) -> Fraction:
    """|output words| / |reference words| of one sentence; 0 for an empty reference."""
    total = words(reference)
    return Fraction(words(hypothesis), total) if total else Fraction(0)


def ratio_bucket_counts(
    hypotheses: Sequence[str],
    references: Sequence[str],
    edges: Sequence[Fraction] = RATIO_EDGES,
) -> list[int]:
    """How many sentences fall in each length-ratio bucket of `edges` (`ratio_labels`)."""
    counts = [0] * (len(edges) + 1)
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        ratio = sentence_ratio(hypothesis, reference)
        counts[bisect_right(edges, ratio)] += 1  # the bucket whose [lo, hi) holds it
    return counts
