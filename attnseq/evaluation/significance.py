"""Is B better than A on one test set? Paired bootstrap (Koehn 2004) and approximate
randomization (Riezler & Maxwell 2005) against a baseline, with 95% intervals: corpus metrics by
sacreBLEU's own tests, means of sentence scores here (`sentence_tests`)."""

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnseq.errors import UserError
from attnseq.evaluation.metrics import sacrebleu_metric

CORPUS_METRICS = ("bleu", "chrf", "ter")  # sacreBLEU's tests
SENTENCE_METRICS = ("rouge1", "rouge2", "rouge_l", "exact_match")  # tested here
TASK_TESTED_METRICS = {
    "translation": ("bleu", "chrf", "ter", "exact_match"),
    "summarization": ("rouge1", "rouge2", "rouge_l", "exact_match"),
}
LOWER_IS_BETTER = {"ter"}
DEFAULT_SEED = 12345  # sacreBLEU's
DEFAULT_RESAMPLES = 1000
DEFAULT_TRIALS = 10000
ALPHA = 0.05  # the level a p-value is called significant at: the tables' stars, k̂'s tests
CHUNK = 1000  # resamples/trials drawn at once: memory CHUNK x n
MAX_DRAWS = 1_000_000  # the most resamples or trials: p-values to 1e-6, sacreBLEU's defaults x1000
MAX_SEED = 2**32 - 1  # numpy's legacy seed, which deepsig sets, takes 32 bits
# Bytes per sentence of one draw at sacreBLEU's peak: the bootstrap's int64 indices beside
# chrF's 18 float32 statistics of each drawn sentence; approximate randomization's two boolean
# selectors and their int64 copy in the matrix product with the statistics.
BOOTSTRAP_BYTES = 8 + 4 * 18
RANDOMIZATION_BYTES = 1 + 1 + 8


@dataclass(frozen=True)
class MetricScore:
    """One system's metric: the score on the whole test set, the bootstrap mean and 95%
    half-width `ci`, and p-values against the baseline (None for the baseline itself)."""

    score: float
    mean: float
    ci: float
    p_bootstrap: float | None = None
    p_randomization: float | None = None

    @property
    def interval(self) -> tuple[float, float]:
        """(mean - ci, mean + ci): the 95% confidence interval."""
        return (self.mean - self.ci, self.mean + self.ci)


def sentence_scores(name: str, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-sentence scores, shape (n,): ROUGE F1 x100 (rouge-score, stemmed, as metrics.py)
    or exact match 0/1; their mean is the corpus value metrics.py reports."""
    if name == "exact_match":
        pairs = zip(hypotheses, references, strict=True)
        return np.array([float(h.strip() == r.strip()) for h, r in pairs])
    from attnseq.evaluation.metrics import ROUGE_KEYS, _rouge_scorer

    key = {ours: package for package, ours in ROUGE_KEYS.items()}[name]
    scorer = _rouge_scorer()
    pairs = zip(hypotheses, references, strict=True)
    return np.array([100.0 * scorer.score(r, h)[key].fmeasure for h, r in pairs])


def check_counts(
    seed: object, resamples: object, trials: object, names: Mapping[str, str] | None = None
) -> None:
    """TypeError for a count that is no int, UserError for one below 1 or above its bound
    (MAX_SEED, MAX_DRAWS); `names`: what the messages call them (a command passes its
    options)."""
    counts = (("seed", seed, MAX_SEED), ("resamples", resamples, MAX_DRAWS))
    for name, value, most in (*counts, ("trials", trials, MAX_DRAWS)):
        called = (names or {}).get(name, name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{called} must be an int, got {type(value).__name__}")
        if value < 1:
            raise UserError(f"{called} must be >= 1, got {value}")
        if value > most:
            raise UserError(f"{called} must be at most {most}, got {value}")


@dataclass(frozen=True)
class Resampling:
    """How the tests draw: the seed of every draw (>= 1: sacreBLEU reads 0 as unseeded), the
    bootstrap's resamples R and approximate randomization's trials T, each checked once, here
    (`check_counts`)."""

    seed: int = DEFAULT_SEED
    resamples: int = DEFAULT_RESAMPLES
    trials: int = DEFAULT_TRIALS

    def __post_init__(self) -> None:
        check_counts(self.seed, self.resamples, self.trials)

    @classmethod
    def checked(
        cls, seed: int, resamples: int, trials: int, names: Mapping[str, str]
    ) -> "Resampling":
        """The Resampling of these counts, checked with the messages calling them `names`
        (`check_counts`)."""
        check_counts(seed, resamples, trials, names)
        return cls(seed, resamples, trials)

    def peak_bytes(self, sentences: int) -> int:
        """The memory sacreBLEU's tests take at once on `sentences` sentences: the larger of
        R x n x BOOTSTRAP_BYTES and T x n x RANDOMIZATION_BYTES."""
        draws = max(self.resamples * BOOTSTRAP_BYTES, self.trials * RANDOMIZATION_BYTES)
        return sentences * draws

    def check_memory(self, sentences: int, names: Mapping[str, str] | None = None) -> None:
        """UserError when `peak_bytes` exceed the available RAM, before any drawing."""
        import torch

        from attnseq.config.resources import check_inference_memory

        called = {"resamples": "resamples", "trials": "trials", **(names or {})}
        bootstrap = self.resamples * BOOTSTRAP_BYTES >= self.trials * RANDOMIZATION_BYTES
        count, name = (self.resamples, "resamples") if bootstrap else (self.trials, "trials")
        check_inference_memory(
            self.peak_bytes(sentences),
            torch.device("cpu"),
            f"{count} {name} of {sentences} sentences",
            called[name],
        )


DEFAULT_RESAMPLING = Resampling()  # sacreBLEU's seed, R and T


def metric_scores(
    systems: Mapping[str, Sequence[str]],
    references: Sequence[str],
    metrics: Sequence[str],
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> dict[str, dict[str, MetricScore]]:
    """system -> metric -> MetricScore, in `metrics`' order: each system's score with its 95%
    bootstrap interval, and every system after the first its p-values against the first (a
    single system gets its intervals alone). Every system has one output per reference, in
    the references' order."""
    for name, outputs in systems.items():
        if len(outputs) != len(references):
            raise UserError(f"{name}: {len(outputs)} outputs but {len(references)} references")
    names = list(systems)
    results: dict[str, dict[str, MetricScore]] = {name: {} for name in names}
    corpus = [metric for metric in metrics if metric in CORPUS_METRICS]
    if corpus:
        factories = {metric: sacrebleu_metric(metric) for metric in corpus}
        table = sacrebleu_paired(systems, references, factories, resampling)
        for name in names:
            results[name].update(table[name])
    for metric in metrics:
        if metric in CORPUS_METRICS:
            continue
        if metric not in SENTENCE_METRICS:
            valid = ", ".join(CORPUS_METRICS + SENTENCE_METRICS)
            raise UserError(f"unknown metric {metric!r}; valid: {valid}")
        scores = {name: sentence_scores(metric, systems[name], references) for name in names}
        for name, result in sentence_tests(scores, resampling).items():
            results[name][metric] = result
    return {name: {metric: results[name][metric] for metric in metrics} for name in names}


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """SACREBLEU_SEED set to `seed` while sacreBLEU draws, then as it was."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def sacrebleu_paired(
    systems: Mapping[str, Sequence[str]],
    references: Sequence[str] | None,
    metrics: Mapping[str, Any],
    resampling: Resampling = DEFAULT_RESAMPLING,
) -> dict[str, dict[str, MetricScore]]:
    """sacreBLEU's paired bootstrap (score, interval, p) and approximate randomization (p) of
    sacreBLEU metric objects (our name -> object); `references` None: the metrics' cached
    references. The first system is the baseline. A system that scores as the baseline does
    gets p = 1: sacreBLEU counts strictly greater differences, which calls a difference of zero
    significant when no resample differs either."""
    from sacrebleu.significance import PairedTest

    named = [(name, list(hypotheses)) for name, hypotheses in systems.items()]
    refs = None if references is None else [list(references)]
    with _sacrebleu_seed(resampling.seed), _statistics_once(metrics.values()):
        _, boot = PairedTest(named, metrics, refs, test_type="bs", n_samples=resampling.resamples)()
        _, rand = PairedTest(named, metrics, refs, test_type="ar", n_samples=resampling.trials)()
    keys = [key for key in boot if key != "System"]  # sacreBLEU's names, in metrics' order
    results: dict[str, dict[str, MetricScore]] = {name: {} for name, _ in named}
    for ours, key in zip(metrics, keys, strict=True):
        for index, (name, _) in enumerate(named):
            shown, randomized = boot[key][index], rand[key][index]
            same = index > 0 and shown.score == boot[key][0].score
            results[name][ours] = MetricScore(
                score=float(shown.score),
                mean=float(shown.mean),
                ci=float(shown.ci),
                p_bootstrap=1.0 if same else _optional(shown.p_value),
                p_randomization=1.0 if same else _optional(randomized.p_value),
            )
    return results


@contextlib.contextmanager
def _statistics_once(metrics: Iterable[Any]) -> Iterator[None]:
    """While the block runs, each sacreBLEU metric of `metrics` extracts a system's
    per-sentence statistics once: sacreBLEU's two tests each extract them again (for the
    baseline and every system), and TER's extraction (a shift search per sentence) costs more
    than all the resampling. The block's references do not change, so the hypotheses alone
    key the cache; afterwards the metrics are as they were."""
    patched = []
    for metric in metrics:
        extract = metric._extract_corpus_statistics
        found: dict[tuple[str, ...], Any] = {}

        def once(hypotheses: Sequence[str], references: Any, extract=extract, found=found) -> Any:
            key = tuple(hypotheses)
            if key not in found:
                found[key] = extract(hypotheses, references)
            return found[key]

        metric._extract_corpus_statistics = once  # the instance's, which the tests call
        patched.append(metric)
    try:
        yield
    finally:
        for metric in patched:
            del metric._extract_corpus_statistics  # the class's method again


def _optional(value: float | None) -> float | None:
    return None if value is None else float(value)


def sentence_tests(
    scores: Mapping[str, np.ndarray], resampling: Resampling = DEFAULT_RESAMPLING
) -> dict[str, MetricScore]:
    """The paired bootstrap (Koehn 2004) and approximate randomization of a metric that is the
    mean of sentence scores: system -> scores of shape (n,), the first the baseline. R test sets
    of n sentences drawn with replacement, the same indices for every system; the interval is
    `estimate_ci` of the R means, and with d = |m(B) - m(A)|

        p_bootstrap = (1 + #{r : |d_r| - mean_r' |d_r'| >= d}) / (R + 1)

    (the resampled differences shifted to mean zero: no difference); `randomization_p` for the
    other. Counting ">=" gives p = 1 to a system scoring as the baseline does."""
    names = list(scores)
    resamples = resampling.resamples
    rng = np.random.default_rng(resampling.seed)
    n = len(scores[names[0]])
    indices = rng.integers(n, size=(resamples, n)) if n else np.zeros((resamples, 0), int)
    means = {name: _means(values, indices) for name, values in scores.items()}
    baseline = scores[names[0]]
    results = {}
    for index, name in enumerate(names):
        mean, ci = estimate_ci(means[name])
        score = float(scores[name].mean()) if n else 0.0
        if index == 0:
            results[name] = MetricScore(score, mean, ci)
            continue
        observed = abs(score - (float(baseline.mean()) if n else 0.0))
        shifted = np.abs(means[name] - means[names[0]])
        shifted -= shifted.mean()
        p_boot = (1 + int(np.sum(shifted >= observed - 1e-12))) / (resamples + 1)
        p_rand = randomization_p(baseline, scores[name], resampling.trials, rng)
        results[name] = MetricScore(score, mean, ci, p_boot, p_rand)
    return results


def _means(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Mean of `values` (n,) over each row of `indices` (R, n) -> (R,)."""
    if values.size == 0:
        return np.zeros(len(indices))
    return values[indices].mean(axis=1)


def estimate_ci(samples: np.ndarray) -> tuple[float, float]:
    """(mean, half-width of the central 95%) of bootstrap scores, as sacreBLEU's estimate_ci:
    the sorted scores' elements R//40 and R - R//40 - 1."""
    ordered = np.sort(samples)
    low = len(ordered) // 40
    return float(ordered.mean()), float(0.5 * (ordered[len(ordered) - low - 1] - ordered[low]))


def randomization_p(
    baseline: np.ndarray, system: np.ndarray, trials: int, rng: np.random.Generator
) -> float:
    """Approximate randomization (Riezler & Maxwell 2005): in each of T trials each sentence's
    two outputs swap systems with probability 1/2, and

        p = (1 + #{t : |m(A_t) - m(B_t)| >= |m(A) - m(B)|}) / (T + 1).

    A swap of
    sentence i changes the difference of means by the sign of d_i = system_i - baseline_i, so
    each trial's |m(A_t) - m(B_t)| = |sum_i s_i d_i| / n with s_i = +-1."""
    differences = system - baseline
    n = len(differences)
    if n == 0:
        return 1.0
    observed = abs(differences.mean())
    count, done = 0, 0
    while done < trials:
        size = min(CHUNK, trials - done)
        signs = rng.integers(2, size=(size, n), dtype=np.int8) * 2 - 1
        shuffled = np.abs(signs @ differences) / n
        count += int(np.sum(shuffled >= observed - 1e-12))
        done += size
    return (1 + count) / (trials + 1)
