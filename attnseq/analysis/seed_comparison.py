"""Is configuration B better than configuration A over its seeds? The `SeedComparison` of seed
groups: per-seed paired tests, k̂ of k (Dror et al. 2017) and the verdict of Almost Stochastic
Order (Dror et al. 2019, as deepsig computes it), its tables and figure; and `compare_paths`,
the entry of `attnseq compare`."""

import json
import math
import statistics
import textwrap
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnseq.analysis.comparison import (
    ARGUMENT_NAMES,
    FORMATS,
    SIGNATURE_NAMES,
    Comparison,
    ComparisonResult,
    Decode,
    SystemDecoding,
    check_extras,
    compare_systems,
    decodes,
    load_system,
    metric_signatures,
    read_lines,
    split_sources,
    system_identity,
)
from attnseq.analysis.seed_groups import (
    Group,
    SeedRun,
    is_sweep_folder,
    plan_groups,
    ready_groups,
    seed_text,
    sweep_requested,
)
from attnseq.analysis.tables import p_value_cell, render_table
from attnseq.errors import UserError
from attnseq.evaluation.buckets import (
    Bucket,
    BucketScore,
    check_edges,
    default_edges,
    length_buckets,
    length_ratio,
    length_unit,
)
from attnseq.evaluation.significance import (
    ALPHA,
    DEFAULT_RESAMPLES,
    DEFAULT_RESAMPLING,
    DEFAULT_SEED,
    DEFAULT_TRIALS,
    LOWER_IS_BETTER,
    TASK_TESTED_METRICS,
    MetricScore,
    Resampling,
    metric_scores,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EPSILON = 0.2  # ASO's threshold on ε_min (Ulmer et al. 2022's recommendation)
ASO_CONFIDENCE = 0.95
BETTER, WORSE, NOT_SIGNIFICANT = "better", "worse", "not significant"
TOO_FEW_SEEDS = "n/a (< 2 seeds)"
SAME_SEED, SORTED_ORDER = "seed", "sorted order"


# ------------------------------------------------------------------------------ statistics
def pair_runs(
    baseline: Sequence[SeedRun], runs: Sequence[SeedRun]
) -> list[tuple[SeedRun, SeedRun, str]]:
    """(baseline run, run, how) pairs: a run with a seed the baseline has is paired with that
    baseline run (how: SAME_SEED); the runs left on both sides, each sorted by seed (runs
    without one last, by name), are paired in that order (SORTED_ORDER); runs left over on the
    larger side have no pair. In the order of the runs' seeds."""
    left, right = list(range(len(baseline))), list(range(len(runs)))
    pairs = []
    for index, run in enumerate(runs):
        match = next(
            (i for i in left if run.seed is not None and baseline[i].seed == run.seed), None
        )
        if match is not None:
            pairs.append((baseline[match], run, SAME_SEED))
            left.remove(match)
            right.remove(index)

    def order(item: SeedRun) -> tuple:
        return (item.seed is None, item.seed or 0, item.system.name)

    rest_a = sorted((baseline[i] for i in left), key=order)
    rest_b = sorted((runs[i] for i in right), key=order)
    pairs += [(a, b, SORTED_ORDER) for a, b in zip(rest_a, rest_b, strict=False)]
    return sorted(pairs, key=lambda pair: order(pair[1]))


def significant_pairs(p_values: Sequence[float], alpha: float = ALPHA) -> int:
    """k̂ of Dror et al. 2017 with Bonferroni's combination: for the k p-values sorted
    p_(1) <= ... <= p_(k), the partial conjunction p-value that at least u of the k null
    hypotheses are false is

        p^(u/k) = (k - u + 1) * p_(u),

    made non-decreasing in u (the running maximum), and k̂ = #{u : p^(u/k) <= alpha}."""
    ordered = sorted(p_values)
    count, running = 0, 0.0
    for u, p in enumerate(ordered, start=1):
        running = max(running, (len(ordered) - u + 1) * p)
        if running > alpha:
            break
        count += 1
    return count


def aso_epsilons(
    scores_b: Sequence[float],
    scores_a: Sequence[float],
    seed: int = DEFAULT_SEED,
    iterations: int = DEFAULT_RESAMPLES,
    comparisons: int = 1,
) -> tuple[float, float]:
    """(ε_min(B over A), ε_min(A over B)) of Almost Stochastic Order (del Barrio,
    Cuesta-Albertos & Matrán 2018; Dror, Shlomov & Reichart 2019, "Deep Dominance", ACL),
    higher scores better: ε is the share of the two score distributions' quantile functions
    where B's lies below A's, bounded from above at a confidence level, ε_min the smallest
    bound. deepsig's `multi_aso` on the two samples, which gives both directions from one bootstrap
    of `iterations` (seeded, one job), at confidence 1 - 0.05/`comparisons` (Bonferroni over
    the groups tested against one baseline; deepsig's own correction is left off). numpy's
    global random state, which deepsig seeds, is restored afterwards."""
    from deepsig import multi_aso

    confidence = 1.0 - (1.0 - ASO_CONFIDENCE) / comparisons
    state = np.random.get_state()
    try:
        with warnings.catch_warnings():  # equal samples: deepsig warns, and takes 0.5
            warnings.filterwarnings("ignore", message="Division by zero encountered")
            matrix = multi_aso(
                {"b": [float(x) for x in scores_b], "a": [float(x) for x in scores_a]},
                confidence_level=confidence,
                use_bonferroni=False,
                num_bootstrap_iterations=iterations,
                num_jobs=1,
                show_progress=False,
                seed=seed,
            )
    finally:
        np.random.set_state(state)
    return float(matrix[0, 1]), float(matrix[1, 0])


def aso_verdict(eps_better: float, eps_worse: float, threshold: float = EPSILON) -> str:
    """The verdict of ASO with deepsig's recommended threshold (Ulmer, Hardmeier & Frellsen
    2022, "deep-significance"):

        better            if ε_min(B over A) < threshold
        worse             if ε_min(A over B) < threshold
        not significant   otherwise

    It needs two seeds or more on both sides, has little power with three, and holds for the
    training budget of the runs compared."""
    if eps_better < threshold:
        return BETTER
    if eps_worse < threshold:
        return WORSE
    return NOT_SIGNIFICANT


@dataclass(frozen=True)
class Verdict:
    """A group against the baseline on one metric: ASO's two ε_min (None below two seeds on
    either side), k̂ of the k tested seed pairs, and the call (`aso_verdict`, or
    TOO_FEW_SEEDS)."""

    eps_better: float | None
    eps_worse: float | None
    significant: int
    tested: int
    call: str


@dataclass(frozen=True)
class SeedPair:
    """A run of a group and the baseline run it is tested against (`pair_runs`); `tests`:
    the run's scores with p-values against that run, None when the two were scored on
    different sentences."""

    run: str
    seed: int | None
    baseline_run: str
    baseline_seed: int | None
    paired_by: str
    tests: dict[str, MetricScore] | None


@dataclass(frozen=True)
class RunResult:
    """One run: its seed, its scores with intervals, its length ratio, its sentences, and its
    bucket scores and counts on the comparison's buckets."""

    run: str
    seed: int | None
    scores: dict[str, MetricScore]
    length_ratio: float
    sentences: int
    bucket_scores: list[BucketScore]
    bucket_counts: list[int]


# ------------------------------------------------------------------------------ the result
# The tables of a single-system comparison that seed groups leave out, said under their tables.
NOT_POOLED = (
    "Word F-measure by training frequency and the attention table (entropy, AER) are made for "
    "single systems: compare two runs of the sweep for them."
)


@dataclass
class SeedComparison(ComparisonResult):
    """Groups of seeds compared with a baseline group (`compare_groups`): each run's scores
    (`runs`), each other group's seed pairs with their tests (`pairs`) and its verdict per
    metric (`verdicts`), the length buckets of `bucket_metric`, how it was computed
    (`settings`, each run's decoding, the sacreBLEU signatures) and the runs left out
    (`notes`)."""

    groups: list[str]
    baseline: str
    task: str
    metrics: list[str]
    runs: dict[str, list[RunResult]]
    pairs: dict[str, list[SeedPair]]
    verdicts: dict[str, dict[str, Verdict]]
    bucket_metric: str
    bucket_by: str
    bucket_unit: str
    buckets: list[Bucket]
    settings: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, SystemDecoding] = field(default_factory=dict)
    signatures: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def values(self, group: str, metric: str) -> list[float]:
        """The group's scores of `metric`, one per run ("length_ratio" too)."""
        if metric == "length_ratio":
            return [run.length_ratio for run in self.runs[group]]
        return [run.scores[metric].score for run in self.runs[group]]

    def mean(self, group: str, metric: str) -> float:
        return statistics.fmean(self.values(group, metric))

    def sd(self, group: str, metric: str) -> float | None:
        """Sample standard deviation over the group's seeds; None for one run."""
        values = self.values(group, metric)
        return statistics.stdev(values) if len(values) > 1 else None

    def seeds(self, group: str) -> list[int | None]:
        return [run.seed for run in self.runs[group]]

    def __repr__(self) -> str:
        metric = self.metrics[0]
        parts = []
        for name in self.groups:
            sd = self.sd(name, metric)
            text = f"{name}: {self.mean(name, metric):.2f}" + ("" if sd is None else f"±{sd:.2f}")
            text += f" ({len(self.runs[name])} seeds)"
            if name in self.verdicts:
                text += f" {self.verdicts[name][metric].call}"
            parts.append(text)
        return f"<SeedComparison of {len(self.groups)} groups, {metric}: " + "; ".join(parts) + ">"

    def to_dict(self) -> dict[str, Any]:
        """Every number of the tables, each run's scores with their intervals, and the rule,
        as JSON-ready values."""
        groups = {}
        for name in self.groups:
            metrics = {
                metric: {
                    "mean": self.mean(name, metric),
                    "sd": self.sd(name, metric),
                    "scores": self.values(name, metric),
                }
                for metric in [*self.metrics, "length_ratio"]
            }
            verdicts = self.verdicts.get(name)
            against = None
            if verdicts is not None:
                against = {
                    metric: {
                        "eps_better": v.eps_better,
                        "eps_worse": v.eps_worse,
                        "significant_pairs": v.significant,
                        "tested_pairs": v.tested,
                        "verdict": v.call,
                    }
                    for metric, v in verdicts.items()
                }
            groups[name] = {
                "seeds": self.seeds(name),
                "metrics": metrics,
                "runs": [_run_dict(run) for run in self.runs[name]],
                "against_baseline": against,
                "pairs": [self._pair_dict(pair) for pair in self.pairs.get(name, [])],
            }
        return {
            "baseline": self.baseline,
            "task": self.task,
            "settings": self.settings,
            "rule": self.rule_lines(),
            "groups": groups,
            "buckets": self._bucket_dict(),
            "decoding": {run: asdict(value) for run, value in self.decoding.items()},
            "signatures": self.signatures,
            "not_pooled": NOT_POOLED,
            "notes": self.notes,
        }

    def _pair_dict(self, pair: SeedPair) -> dict[str, Any]:
        tests = None
        if pair.tests is not None:
            base = self._score_of(pair.baseline_run)
            tests = {
                metric: {
                    "difference": value.score - base[metric].score,
                    "p_bootstrap": value.p_bootstrap,
                    "p_randomization": value.p_randomization,
                }
                for metric, value in pair.tests.items()
            }
        return {
            "run": pair.run,
            "seed": pair.seed,
            "baseline_run": pair.baseline_run,
            "baseline_seed": pair.baseline_seed,
            "paired_by": pair.paired_by,
            "metrics": tests,
        }

    def _score_of(self, run_name: str) -> dict[str, MetricScore]:
        for runs in self.runs.values():
            for run in runs:
                if run.run == run_name:
                    return run.scores
        raise KeyError(run_name)

    def _bucket_dict(self) -> dict[str, Any]:
        scores = {}
        for name in self.groups:
            mean, low, high = self.bucket_summary(name)
            runs = {
                run.run: [
                    {"score": s.score, "low": s.low, "high": s.high, "sentences": n}
                    for s, n in zip(run.bucket_scores, run.bucket_counts, strict=True)
                ]
                for run in self.runs[name]
            }
            scores[name] = {"mean": mean, "lowest_seed": low, "highest_seed": high, "runs": runs}
        return {
            "metric": self.bucket_metric,
            "by": f"{self.bucket_by} {self.bucket_unit}",
            "buckets": [{"length": bucket.label} for bucket in self.buckets],
            "scores": scores,
        }

    def bucket_sentences(self, index: int) -> str:
        """The sentences of bucket `index`: a number, or a range when the runs' test sets
        differ."""
        counts = {run.bucket_counts[index] for runs in self.runs.values() for run in runs}
        return "-".join(str(n) for n in sorted({min(counts), max(counts)}))

    def bucket_summary(self, group: str) -> tuple[list[float], list[float], list[float]]:
        """Per bucket the mean of the group's runs' scores, and the lowest and highest run's;
        NaN where no run has a sentence in the bucket."""
        means, lows, highs = [], [], []
        for index in range(len(self.buckets)):
            found = [
                run.bucket_scores[index].score
                for run in self.runs[group]
                if run.bucket_counts[index]
            ]
            means.append(statistics.fmean(found) if found else math.nan)
            lows.append(min(found, default=math.nan))
            highs.append(max(found, default=math.nan))
        return means, lows, highs

    def render(self, output_format: str = "text") -> str:
        """The metric table with the verdicts and the rule under it, the per-seed tests and
        the bucket table, as text, markdown, latex, or the JSON of `to_dict`."""
        if output_format == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        if output_format not in FORMATS:
            raise UserError(f"format must be one of {', '.join(FORMATS)}, got {output_format!r}")
        measured = f"{self.bucket_by} length ({self.bucket_unit})"
        parts = [
            render_table(*self.metric_rows(), output_format),
            "",  # a markdown table runs on into the next line without a blank one
            *(textwrap.fill(line, width=100) for line in self.rule_lines()),
            "",
            f"per-seed paired tests against {self.baseline}: difference (approximate "
            "randomization p):",
            render_table(*self.pair_rows(), output_format),
            "",
            f"{self.bucket_metric} by {measured}, mean over seeds [lowest, highest seed]:",
            render_table(*self.bucket_rows(), output_format),
            "",
            *self.work_lines(),
            "",
            textwrap.fill(NOT_POOLED, width=100),
            *([""] + self.notes if self.notes else []),
        ]
        return "\n".join(parts) + "\n"

    def work_lines(self) -> list[str]:
        """How the runs were decoded (one line when alike) and the sacreBLEU signatures."""
        names = {value.name or value.text() for value in self.decoding.values()}
        if len(names) == 1:
            lines = [f"decoding: {names.pop()} (every run; its eval result under RUN/eval)"]
        else:
            lines = ["decoding:"]
            lines += [f"  {run}: {value.text()}" for run, value in self.decoding.items()]
        if self.signatures:
            lines.append("signatures (sacreBLEU):")
            lines += [f"  {SIGNATURE_NAMES[key]}: {text}" for key, text in self.signatures.items()]
        return lines

    def metric_rows(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows, one per metric and group: the seeds, mean ± sd over them, and
        against the baseline k̂/k, both ε_min and the verdict; then the length ratios."""
        head = ["metric", "group", "seeds", "mean ± sd", "k̂/k", "ε(B>A)", "ε(A>B)", "verdict"]
        rows = []
        for metric in [*self.metrics, "length_ratio"]:
            digits = 3 if metric in ("exact_match", "length_ratio") else 2
            for name in self.groups:
                shown = name + (" (baseline)" if name == self.baseline else "")
                sd = self.sd(name, metric)
                spread = f"{self.mean(name, metric):.{digits}f}"
                spread += "" if sd is None else f" ± {sd:.{digits}f}"
                seeds = ",".join("-" if seed is None else str(seed) for seed in self.seeds(name))
                verdict = self.verdicts.get(name, {}).get(metric)
                rows.append([metric, shown, seeds, spread, *_verdict_cells(verdict)])
        return head, rows

    def pair_rows(self) -> tuple[list[str], list[list[str]]]:
        """One row per seed pair: the group, the two seeds, how they were paired, and per
        metric the difference to the baseline run with its approximate randomization p."""
        head = ["group", "seed", "baseline seed", "paired by", *self.metrics]
        rows = []
        for name in self.groups[1:]:
            for pair in self.pairs[name]:
                row = [name, seed_text(pair.seed), seed_text(pair.baseline_seed), pair.paired_by]
                if pair.tests is None:
                    row += ["different test sets"] + ["-"] * (len(self.metrics) - 1)
                else:
                    base = self._score_of(pair.baseline_run)
                    for metric in self.metrics:
                        value = pair.tests[metric]
                        digits = 3 if metric == "exact_match" else 2
                        difference = f"{value.score - base[metric].score:+.{digits}f}"
                        row.append(f"{difference} ({p_value_cell(value.p_randomization)})")
                rows.append(row)
        return head, rows

    def bucket_rows(self) -> tuple[list[str], list[list[str]]]:
        """One row per length bucket: its sentences (a range when the runs' test sets
        differ), and per group the mean over seeds [lowest, highest seed]."""
        head = [self.bucket_unit, "sentences", *self.groups]
        summaries = {name: self.bucket_summary(name) for name in self.groups}
        rows = []
        for index, bucket in enumerate(self.buckets):
            row = [bucket.label, self.bucket_sentences(index)]
            for name in self.groups:
                mean, low, high = (values[index] for values in summaries[name])
                if math.isnan(mean):
                    row.append("-")
                elif len(self.runs[name]) == 1:
                    row.append(f"{mean:.2f}")
                else:
                    row.append(f"{mean:.2f} [{low:.2f}, {high:.2f}]")
            rows.append(row)
        return head, rows

    def rule_lines(self) -> list[str]:
        """What the columns mean and the rule that calls a difference (`aso_verdict`,
        `significant_pairs`)."""
        s = self.settings
        lower = ", ".join(sorted(LOWER_IS_BETTER & set(self.metrics)))
        level = f"confidence {s['aso_confidence']:.4g}"
        if s["comparisons"] > 1:
            level += f" (0.95, Bonferroni over {s['comparisons']} groups)"
        return [
            "verdict: Almost Stochastic Order over the seeds' scores (Dror et al. 2019; "
            f"deepsig, Ulmer et al. 2022): better when ε(B>A) < {s['epsilon']}, worse when "
            f"ε(A>B) < {s['epsilon']}, else not significant; ε_min at {level}, "
            f"{s['resamples']} bootstrap iterations, seed {s['seed']}. It needs two seeds or "
            "more in both groups, has little power with three, and holds for the training "
            "budget of these runs.",
            "k̂/k: of k seed pairs, how many differ significantly in the direction of the "
            f"mean difference (approximate randomization, {s['trials']} trials; partial "
            f"conjunction with Bonferroni, α = {s['alpha']}; Dror et al. 2017). Pairs: by seed "
            "where both groups have it, else in sorted order of the seeds."
            + (f" {lower}: lower is better." if lower else ""),
        ]

    def figure(self) -> "Figure":
        """The bucket metric by length: per group its mean over seeds, and a band from the
        lowest to the highest seed's score."""
        from matplotlib.figure import Figure

        figure = Figure(figsize=(6.4, 3.9), layout="constrained")
        ax = figure.subplots()
        positions = list(range(len(self.buckets)))
        for name in self.groups:
            mean, low, high = self.bucket_summary(name)
            label = f"{name} ({len(self.runs[name])} seeds)"
            line = ax.plot(positions, mean, marker="o", label=label)[0]
            ax.fill_between(positions, low, high, alpha=0.2, color=line.get_color())
        ticks = [
            f"{bucket.label}\n(n={self.bucket_sentences(index)})"
            for index, bucket in enumerate(self.buckets)
        ]
        ax.set_xticks(positions, ticks)
        ax.set_xlabel(f"{self.bucket_by} length ({self.bucket_unit})")
        ax.set_ylabel(self.bucket_metric)
        ax.set_title(
            f"{self.bucket_metric} by {self.bucket_by} length: mean over seeds, "
            "band from the lowest to the highest seed",
            fontsize=9,
        )
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        return figure


def _verdict_cells(verdict: Verdict | None) -> list[str]:
    """k̂/k, the two ε_min and the call; dashes for the baseline and the length ratio."""
    if verdict is None:
        return ["-", "-", "-", "-"]
    tested = f"{verdict.significant}/{verdict.tested}" if verdict.tested else "-"
    eps = ["-" if e is None else f"{e:.3f}" for e in (verdict.eps_better, verdict.eps_worse)]
    return [tested, *eps, verdict.call]


def _run_dict(run: RunResult) -> dict[str, Any]:
    return {
        "run": run.run,
        "seed": run.seed,
        "sentences": run.sentences,
        "length_ratio": run.length_ratio,
        "metrics": {
            metric: {"score": value.score, "mean": value.mean, "ci": value.ci}
            for metric, value in run.scores.items()
        },
    }


# ------------------------------------------------------------------------------ comparing
def compare_groups(
    groups: Sequence[Group],
    baseline: str,
    references: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    task: str | None = None,
    resampling: Resampling = DEFAULT_RESAMPLING,
    edges: Sequence[int] | None = None,
    metrics: Sequence[str] | None = None,
    names: Mapping[str, str] | None = None,
) -> SeedComparison:
    """Compare groups as `ready_groups` leaves them with the group named `baseline`: each
    run's scores, the seed pairs' tests and each group's verdicts, drawn as `resampling` says,
    and the length buckets (`edges`: their lower edges). `references`: one reference file for
    every run (default: each run's eval result's); `sources`: for the length buckets (default:
    each test set's split, read from its checkpoint's data where this machine can); `metrics`:
    some of the task's (default: all; the first is the buckets'); `names`: what messages call
    the resampling's counts (comparison.ARGUMENT_NAMES)."""
    order = [baseline, *[group.name for group in groups if group.name != baseline]]
    runs = {group.name: group.runs for group in groups}
    runs = {name: runs[name] for name in order}
    refs = _run_references(runs, references)
    every = [run for name in order for run in runs[name]]
    task = task or next((run.system.task for run in every if run.system.task), None)
    task = task or "translation"
    metrics = _chosen_metrics(task, metrics)
    resampling.check_memory(max(len(refs[run.system.name]) for run in every), names)
    # Each run alone: its scores with intervals (its tests against the baseline come after).
    alone = replace(resampling, trials=1)
    scores = {}
    for run in every:
        name = run.system.name
        scores[name] = metric_scores({"run": run.system.hypotheses}, refs[name], metrics, alone)
        scores[name] = scores[name]["run"]
    pairs, verdicts = _against_baseline(runs, scores, refs, metrics, resampling)
    buckets, by, unit, per_run = _buckets(every, refs, sources, metrics[0], edges, resampling)
    results = {
        name: [_run_result(run, scores, refs, per_run) for run in runs[name]] for name in order
    }
    comparisons = len(order) - 1
    settings = {
        **asdict(resampling),
        "alpha": ALPHA,
        "epsilon": EPSILON,
        "comparisons": comparisons,
        "aso_confidence": 1.0 - (1.0 - ASO_CONFIDENCE) / comparisons,
    }
    return SeedComparison(
        groups=order,
        baseline=baseline,
        task=task,
        metrics=metrics,
        runs=results,
        pairs=pairs,
        verdicts=verdicts,
        bucket_metric=metrics[0],
        bucket_by=by,
        bucket_unit=unit,
        buckets=buckets,
        settings=settings,
        decoding={run.system.name: run.system.decoding for run in every},
        signatures=metric_signatures(metrics),
    )


def _run_result(
    run: SeedRun,
    scores: Mapping[str, dict[str, MetricScore]],
    refs: Mapping[str, list[str]],
    per_run: Mapping[str, tuple[list[BucketScore], list[int]]],
) -> RunResult:
    name = run.system.name
    bucket_scores, bucket_counts = per_run[name]
    return RunResult(
        run=name,
        seed=run.seed,
        scores=scores[name],
        length_ratio=length_ratio(run.system.hypotheses, refs[name]),
        sentences=len(refs[name]),
        bucket_scores=bucket_scores,
        bucket_counts=bucket_counts,
    )


def _chosen_metrics(task: str, metrics: Sequence[str] | None) -> list[str]:
    """`metrics` (each one the task reports), else all of the task's."""
    if task not in TASK_TESTED_METRICS:
        raise UserError(f"unknown task {task!r}; valid: {', '.join(TASK_TESTED_METRICS)}")
    valid = TASK_TESTED_METRICS[task]
    unknown = [metric for metric in metrics or [] if metric not in valid]
    if unknown or metrics is not None and not metrics:
        raise UserError(f"metrics of {task}: {', '.join(valid)}; got {list(metrics or [])}")
    return list(metrics) if metrics else list(valid)


def _run_references(
    runs: Mapping[str, Sequence[SeedRun]], given: Sequence[str] | None
) -> dict[str, list[str]]:
    """Each run's references (`given`, else its eval result's), checked against its
    outputs."""
    found = {}
    for run in (run for group in runs.values() for run in group):
        system = run.system
        own = system.references
        if given is not None and own is not None and own != list(given):
            raise UserError(f"{system.name}: its references differ from the given ones")
        references = list(given) if given is not None else own
        if references is None:
            raise UserError(
                f"{system.name}: no references: give a reference file, or compare eval result "
                "folders, run directories or checkpoints"
            )
        if not references:
            raise UserError(f"{system.name}: the references are empty: nothing to compare")
        if len(system.hypotheses) != len(references):
            raise UserError(
                f"{system.name}: {len(system.hypotheses)} lines but its references have "
                f"{len(references)}: a system gives one output per reference"
            )
        found[system.name] = references
    return found


def _against_baseline(
    runs: Mapping[str, Sequence[SeedRun]],
    scores: Mapping[str, Mapping[str, MetricScore]],
    refs: Mapping[str, list[str]],
    metrics: Sequence[str],
    resampling: Resampling,
) -> tuple[dict[str, list[SeedPair]], dict[str, dict[str, Verdict]]]:
    """Each group but the first (the baseline): its seed pairs with their paired tests, and
    its verdict per metric."""
    names = list(runs)
    baseline = runs[names[0]]
    pairs: dict[str, list[SeedPair]] = {}
    verdicts: dict[str, dict[str, Verdict]] = {}
    for name in names[1:]:
        found = []
        for a, b, how in pair_runs(baseline, runs[name]):
            tests = None
            if refs[a.system.name] == refs[b.system.name]:
                outputs = {a.system.name: a.system.hypotheses, b.system.name: b.system.hypotheses}
                tests = metric_scores(outputs, refs[a.system.name], metrics, resampling)
                tests = tests[b.system.name]
            found.append(SeedPair(b.system.name, b.seed, a.system.name, a.seed, how, tests))
        pairs[name] = found
        verdicts[name] = {
            metric: group_verdict(
                metric,
                baseline_scores=[scores[run.system.name][metric].score for run in baseline],
                scores=[scores[run.system.name][metric].score for run in runs[name]],
                pair_tests=_pair_p_values(found, scores, metric),
                seed=resampling.seed,
                iterations=resampling.resamples,
                comparisons=len(names) - 1,
            )
            for metric in metrics
        }
    return pairs, verdicts


def _pair_p_values(
    pairs: Sequence[SeedPair], scores: Mapping[str, Mapping[str, MetricScore]], metric: str
) -> list[tuple[float, float]]:
    """(difference to the baseline run, approximate randomization p) of each tested pair."""
    found = []
    for pair in pairs:
        if pair.tests is not None:
            value = pair.tests[metric]
            difference = value.score - scores[pair.baseline_run][metric].score
            p = value.p_randomization
            found.append((difference, 1.0 if p is None else p))
    return found


def group_verdict(
    metric: str,
    baseline_scores: Sequence[float],
    scores: Sequence[float],
    pair_tests: Sequence[tuple[float, float]],
    seed: int = DEFAULT_SEED,
    iterations: int = DEFAULT_RESAMPLES,
    comparisons: int = 1,
) -> Verdict:
    """A group against the baseline on `metric`: k̂ (`significant_pairs`) of the tested pairs
    ((difference, p) each) in the direction of the mean difference, and ASO's call over the
    seeds' scores (negated where lower is better)."""
    rising = statistics.fmean(scores) >= statistics.fmean(baseline_scores)
    p_values = [
        p if (difference > 0) == rising and difference != 0 else 1.0 for difference, p in pair_tests
    ]
    significant = significant_pairs(p_values)
    if min(len(scores), len(baseline_scores)) < 2:
        return Verdict(None, None, significant, len(p_values), TOO_FEW_SEEDS)
    sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
    eps_better, eps_worse = aso_epsilons(
        scores_b=[sign * x for x in scores],
        scores_a=[sign * x for x in baseline_scores],
        seed=seed,
        iterations=iterations,
        comparisons=comparisons,
    )
    call = aso_verdict(eps_better, eps_worse)
    return Verdict(eps_better, eps_worse, significant, len(p_values), call)


def _buckets(
    runs: Sequence[SeedRun],
    refs: Mapping[str, list[str]],
    sources: Sequence[str] | None,
    metric: str,
    edges: Sequence[int] | None,
    resampling: Resampling,
) -> tuple[list[Bucket], str, str, dict[str, tuple[list[BucketScore], list[int]]]]:
    """The buckets (of the first run's test set), by source length when every test set's
    sources are known, else by reference length; each run's bucket scores and counts on the
    same edges (given, else the first run's quartiles)."""
    sets: dict[tuple[str, ...], list[SeedRun]] = {}
    for run in runs:
        sets.setdefault(tuple(refs[run.system.name]), []).append(run)
    measured = {key: _test_sources(members, len(key), sources) for key, members in sets.items()}
    by = "source" if all(texts is not None for texts in measured.values()) else "reference"
    texts = {key: list(key) if by == "reference" else measured[key] or [] for key in sets}
    first = next(iter(sets))
    unit = length_unit(texts[first])
    edges = list(edges) if edges is not None else default_edges(texts[first], unit)
    shown: list[Bucket] = []
    per_run = {}
    for key, members in sets.items():
        outputs = {run.system.name: run.system.hypotheses for run in members}
        buckets, table = length_buckets(
            texts[key], outputs, list(key), metric, edges, resampling, unit
        )
        shown = shown or buckets
        for name in outputs:
            per_run[name] = (table[name], [bucket.count for bucket in buckets])
    return shown, by, unit, per_run


def _test_sources(
    runs: Sequence[SeedRun], count: int, given: Sequence[str] | None
) -> list[str] | None:
    """The sources of a test set: those given, else the split of its first run that this
    machine can read (comparison.split_sources); None without."""
    if given is not None:
        if len(given) != count:
            raise UserError(f"{len(given)} sources but {count} references")
        return list(given)
    for run in runs:
        system = run.system
        if system.checkpoint is not None and system.split is not None:
            found = split_sources(system.checkpoint, system.split)
            if found is not None and len(found) == count:
                return found
    return None


# ------------------------------------------------------------------ what `attnseq compare` compares
TextInput = Path | Sequence[str] | None  # a file of lines, the lines themselves, or none


def compare_paths(
    paths: Sequence[str | Path],
    baseline: str | Path | None = None,
    references: TextInput = None,
    sources: TextInput = None,
    task: str | None = None,
    split: str = "test",
    device: str = "auto",
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    trials: int = DEFAULT_TRIALS,
    edges: Sequence[int] | None = None,
    train_references: TextInput = None,
    gold: Path | None = None,
    attention: bool = True,
    names: Mapping[str, str] | None = None,
    decoding: Mapping[str, Any] | None = None,
) -> "Comparison | SeedComparison":
    """`attnseq compare` and `attnseq.compare` of `paths`, each run decoded on `split` (with
    `decoding`'s changes of its settings: setting -> value, as eval takes them) or its eval
    result reused: when one of them is a sweep folder, their seed groups (`plan_groups`)
    against `baseline` (a group's name or a path; default the first group) by
    `compare_groups`; else each path one system (comparison.load_system) against `baseline` (a
    path, put first when it is not among them by identity; default the first) by
    comparison.compare_systems. `references`, `sources` and `train_references`: a file (read
    with the data readers' line rule) or the lines. Gold links and training references score
    single systems only. Every mistake that can be known is refused before any decoding;
    `names`: what messages call the arguments (comparison.ARGUMENT_NAMES, whose keys a
    command maps to its options)."""
    called = ARGUMENT_NAMES | dict(names or {})
    resampling = Resampling.checked(seed, resamples, trials, called)
    check_edges(edges, called["buckets"])
    changes = _decoding_changes(decoding, called)
    given = [Path(path) for path in paths]
    texts = {
        key: _text_input(value, called[key])
        for key, value in (
            ("references", references),
            ("sources", sources),
            ("train_references", train_references),
        )
    }
    keep = [(called[key], path) for key, (_, path) in texts.items() if path is not None]
    keep += [] if gold is None else [(called["gold"], gold)]
    refs, srcs, train = (lines for lines, _ in texts.values())
    if changes and not any(decodes(path) or is_sweep_folder(path) for path in given):
        option = called["beam" if "beam" in changes else "length_penalty"]
        raise UserError(
            f"{option} decodes run directories and checkpoints, and none is compared "
            "(hypothesis files and eval results are decoded already)"
        )
    if sweep_requested(given):
        if gold is not None or train is not None:
            raise UserError(
                f"{called['gold']} and {called['train_references']} score single systems, not "
                "the seed groups of a sweep folder"
            )
        decode = Decode(split, device, changes, tuple(keep))
        return _compare_sweep(given, baseline, decode, refs, srcs, task, resampling, edges, called)
    if len(given) < 2 and not (baseline is not None and given):
        raise UserError(
            f"comparing needs at least two systems (and {called['baseline']} names one), got "
            f"{len(given)}"
        )
    if gold is not None:
        read_lines(gold, f"{called['gold']} file")  # a UTF-8 text file: before any decoding
    check_extras(train, gold, attention, called)
    given, baseline = _systems_and_baseline(given, baseline, called)
    decode = Decode(split, device, changes, tuple(keep + [(called["systems"], p) for p in given]))
    loaded = [load_system(path, decode) for path in given]
    refs_file = texts["references"][1]
    result = compare_systems(
        loaded,
        baseline=None if baseline is None else str(baseline),
        references=refs,
        sources=srcs,
        task=task,
        resampling=resampling,
        edges=edges,
        train_references=train,
        gold=gold,
        attention=attention,
        device=device,
        names=called,
        references_from=None if refs_file is None else str(refs_file),
    )
    result.inputs += keep
    return result


def _compare_sweep(
    given: Sequence[Path],
    baseline: str | Path | None,
    decode: Decode,
    references: Sequence[str] | None,
    sources: Sequence[str] | None,
    task: str | None,
    resampling: Resampling,
    edges: Sequence[int] | None,
    names: Mapping[str, str],
) -> SeedComparison:
    """The seed groups of `given` (a sweep folder among them) compared, their unfinished runs
    said in the notes."""
    notes: list[str] = []
    groups = plan_groups(given, notes)
    chosen = ready_groups(groups, baseline, names["baseline"], decode)
    result = compare_groups(
        groups, chosen, references, sources, task, resampling, edges, names=names
    )
    result.notes += notes
    result.inputs = list(decode.keep) + [
        item for group in groups for run in group.runs for item in run.system.files()
    ]
    return result


def _systems_and_baseline(
    given: Sequence[Path], baseline: str | Path | None, names: Mapping[str, str]
) -> tuple[list[Path], Path | None]:
    """The systems, none two by one identity (`system_identity`: a symbolic or hard link,
    another spelling is the same system), and the baseline: the system it names by identity,
    else put first."""
    seen: dict[object, Path] = {}
    for path in given:
        key = system_identity(path)
        if key in seen:
            raise UserError(f"{path} is {seen[key]}: a system is given twice")
        seen[key] = path
    systems = list(given)
    if baseline is None:
        return systems, None
    found = seen.get(system_identity(Path(baseline)))
    if found is None:
        systems.insert(0, Path(baseline))
    return systems, found or Path(baseline)


def _text_input(value: TextInput, name: str) -> tuple[list[str] | None, Path | None]:
    """(lines, the file they were read from) of a text argument: a file or the lines."""
    if value is None:
        return None, None
    if isinstance(value, Path):
        return read_lines(value, f"{name} file"), value
    return list(value), None


def _decoding_changes(decoding: Mapping[str, Any] | None, names: Mapping[str, str]) -> dict:
    """The decoding settings to change (beam, length_penalty), each checked against its
    setting's bounds (config.checks.value_problem), the messages naming it as `names` says."""
    from attnseq.config.checks import value_problem
    from attnseq.config.schema import DecodingConfig

    specs = {spec.name: spec for spec in fields(DecodingConfig)}
    changes = {key: value for key, value in (decoding or {}).items() if value is not None}
    for key, value in changes.items():
        if key not in ("beam", "length_penalty"):
            raise TypeError(f"no decoding setting {key!r} to compare with: beam, length_penalty")
        problem = value_problem(value, specs[key].metadata)
        if problem:
            raise UserError(f"{names[key]} {problem}, got {value}")
    return changes
