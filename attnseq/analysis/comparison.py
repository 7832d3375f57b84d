"""Is A better than B? The systems of a comparison, their paired tests and length buckets as
one result, its tables (text, markdown, LaTeX, JSON) and its figure (`attnseq compare`,
`attnseq.compare`).

A system is one of:

- a hypothesis file: one output per line, parallel to the references;
- an `attnseq eval` result folder (hyps.txt, refs.txt, metrics.json:
  attnseq/evaluation/checkpoint_eval.py), whose refs.txt serves as the references;
- a checkpoint or a run directory (its checkpoints/best.pt): its `eval` result for the split
  with the checkpoint's own decoding settings is reused when RUN/eval holds it, else the split is
  decoded through `evaluate_checkpoint`, which writes that result folder.

The task (translation: BLEU, chrF, TER, exact match; summarization: ROUGE-1/2/L, exact match)
comes from the eval records' metric names, or is given. The tests are those of
attnseq/evaluation/significance.py against the baseline (the first system unless named); the
buckets (attnseq/evaluation/buckets.py) are by source length when the sources are given, else by
reference length, on the task's first metric.
"""

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnseq.errors import UserError
from attnseq.evaluation.buckets import (
    Bucket,
    BucketScore,
    length_buckets,
    length_ratio,
    length_unit,
)
from attnseq.evaluation.significance import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_TRIALS,
    LOWER_IS_BETTER,
    TASK_TESTED_METRICS,
    MetricScore,
    check_test_sizes,
    paired_tests,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("text", "markdown", "latex", "json")
ALPHA = 0.05  # the level a p-value is called significant at in the tables


@dataclass
class System:
    """One system's outputs; `references` when its source brings them (an eval folder)."""

    name: str
    hypotheses: list[str]
    references: list[str] | None = None
    task: str | None = None
    path: Path | None = None
    checkpoint: Path | None = None  # what an eval result was of, and its split: the sources
    split: str | None = None


def read_lines(path: Path, what: str) -> list[str]:
    """The lines of a UTF-8 text file, or a UserError naming it."""
    if not path.is_file():
        raise UserError(f"{what} {path}: no such file")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{what} {path}: cannot read it ({error})") from None


def _task_of(record: Mapping[str, Any]) -> str | None:
    keys = [key.split("/", 1)[-1] for key in record]
    if "rouge1" in keys:
        return "summarization"
    if "bleu" in keys:
        return "translation"
    return None


def eval_folder_system(folder: Path, name: str) -> System:
    """A system from an `attnseq eval` result folder."""
    record = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    hypotheses = read_lines(folder / "hyps.txt", "eval result")
    references = read_lines(folder / "refs.txt", "eval result")
    checkpoint = Path(record["checkpoint"]) if record.get("checkpoint") else None
    split = str(record.get("split"))
    return System(name, hypotheses, references, _task_of(record), folder, checkpoint, split)


def split_sources(checkpoint: Path, split: str) -> list[str] | None:
    """The source texts of a dataset split of the checkpoint's data, as evaluation reads it
    (kept examples, in order); None when the checkpoint or the split cannot be read here."""
    from attnseq.config.conversion import config_from_dict
    from attnseq.data.prepare import prepare_data
    from attnseq.data.tokenizers import TokenizerPair
    from attnseq.io.checkpoint import load_checkpoint

    if not checkpoint.is_file():
        return None
    try:
        payload = load_checkpoint(checkpoint)
        cfg = config_from_dict(payload["config"])
        tokenizers = TokenizerPair.from_state(payload["tokenizers"])
        data = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=[split])
        return [source for source, _ in data.pairs[split]]
    except (UserError, KeyError, OSError):  # a file split, data not on this machine, ...
        return None


def existing_eval(checkpoint: Path, split: str) -> Path | None:
    """The eval result folder of `checkpoint` on `split` with its own decoding settings and no
    overrides, when RUN/eval (checkpoint_eval.default_root) holds it complete."""
    from attnseq.config.conversion import config_from_dict
    from attnseq.evaluation.checkpoint_eval import checkpoint_step, default_root, result_folder
    from attnseq.io.checkpoint import load_checkpoint

    payload = load_checkpoint(checkpoint)
    try:
        decoding = config_from_dict(payload["config"]).decoding
    except Exception:  # not a config this version reads: decode, which says what is wrong
        return None
    folder = result_folder(
        default_root(checkpoint), checkpoint, checkpoint_step(payload), split, decoding
    )
    if not (folder / "metrics.json").is_file():
        return None
    record = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    same = record.get("checkpoint") == str(checkpoint.resolve()) and not record.get("overrides")
    return folder if same and record.get("split") == split else None


def checkpoint_system(path: Path, name: str, split: str, device: str) -> System:
    """A system from a checkpoint or run directory: its eval result on `split`, reused or
    made."""
    from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint

    checkpoint = path / "checkpoints" / "best.pt" if path.is_dir() else path
    if not checkpoint.is_file():
        missing = "a run directory without checkpoints/best.pt" if path.is_dir() else "no such file"
        raise UserError(f"checkpoint {path}: {missing}")
    folder = existing_eval(checkpoint, split)
    if folder is None:
        folder = evaluate_checkpoint(checkpoint, split, device_name=device).result.folder
    return eval_folder_system(folder, name)


def load_system(path: str | Path, split: str = "test", device: str = "auto") -> System:
    """The system at `path` (module docstring), named by its path as given."""
    path = Path(path)
    name = str(path)
    if path.is_dir() and (path / "hyps.txt").is_file() and (path / "metrics.json").is_file():
        return eval_folder_system(path, name)
    if path.is_dir() and (path / "checkpoints").is_dir():
        return checkpoint_system(path, name, split, device)
    if path.is_dir():
        raise UserError(
            f"{path}: not a system (a hypothesis file, an eval result folder, a run "
            "directory or a checkpoint)"
        )
    if path.suffix == ".pt":
        return checkpoint_system(path, name, split, device)
    return System(name, read_lines(path, "hypothesis file"), path=path)


@dataclass
class Comparison:
    """The result of comparing systems with a baseline (module docstring): per system and
    metric a MetricScore; the length buckets of `bucket_metric` with each system's scores and
    intervals; each system's output/reference length ratio; and how it was computed."""

    systems: list[str]
    baseline: str
    task: str
    metrics: list[str]
    scores: dict[str, dict[str, MetricScore]]
    bucket_metric: str
    bucket_by: str
    bucket_unit: str
    buckets: list[Bucket]
    bucket_scores: dict[str, list[BucketScore]]
    length_ratios: dict[str, float]
    sentences: int
    settings: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        metric = self.metrics[0]
        parts = []
        for name in self.systems:
            score = self.scores[name][metric]
            text = f"{name}: {score.score:.2f}±{score.ci:.2f}"
            if score.p_bootstrap is not None:
                text += f" (p={score.p_bootstrap:.3g})"
            parts.append(text)
        return f"<Comparison of {len(self.systems)} systems on {self.sentences} sentences, " + (
            f"{metric}: " + "; ".join(parts) + ">"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every number of the tables, as JSON-ready values."""
        return {
            "baseline": self.baseline,
            "task": self.task,
            "sentences": self.sentences,
            "settings": self.settings,
            "systems": {
                name: {
                    metric: {
                        "score": value.score,
                        "mean": value.mean,
                        "ci": value.ci,
                        "p_bootstrap": value.p_bootstrap,
                        "p_randomization": value.p_randomization,
                    }
                    for metric, value in self.scores[name].items()
                }
                | {"length_ratio": self.length_ratios[name]}
                for name in self.systems
            },
            "buckets": {
                "metric": self.bucket_metric,
                "by": f"{self.bucket_by} {self.bucket_unit}",
                "buckets": [
                    {"length": bucket.label, "sentences": bucket.count} for bucket in self.buckets
                ],
                "scores": {
                    name: [
                        {"score": value.score, "low": value.low, "high": value.high}
                        for value in row
                    ]
                    for name, row in self.bucket_scores.items()
                },
            },
        }

    def render(self, output_format: str = "text") -> str:
        """The metric table and the bucket table as text, markdown, latex, or the JSON of
        `to_dict`."""
        if output_format == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        if output_format not in FORMATS:
            raise UserError(f"format must be one of {', '.join(FORMATS)}, got {output_format!r}")
        head, rows = self.metric_rows()
        bucket_head, bucket_rows = self.bucket_rows()
        parts = [
            _table(head, rows, output_format),
            self.rule_line(),
            "",
            f"{self.bucket_metric} by {self.bucket_by} length ({self.bucket_unit}), 95% interval:",
            _table(bucket_head, bucket_rows, output_format),
        ]
        return "\n".join(parts) + "\n"

    def metric_rows(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows, one per metric and system: the score, the half-width of its 95%
        interval, the paired bootstrap and approximate randomization p-values against the
        baseline; then each system's length ratio."""
        head = ["metric", "system", "score", "± 95%", "p (bs)", "p (ar)"]
        rows = []
        for metric in self.metrics:
            for name in self.systems:
                value = self.scores[name][metric]
                shown = name + (" (baseline)" if name == self.baseline else "")
                digits = 3 if metric == "exact_match" else 2  # a share, not x100
                rows.append([metric, shown, f"{value.score:.{digits}f}", f"{value.ci:.{digits}f}",
                             _p(value.p_bootstrap), _p(value.p_randomization)])  # fmt: skip
        for name in self.systems:
            rows.append(["length_ratio", name, f"{self.length_ratios[name]:.3f}", "", "", ""])
        return head, rows

    def bucket_rows(self) -> tuple[list[str], list[list[str]]]:
        head = [self.bucket_unit, "sentences", *self.systems]
        rows = []
        for index, bucket in enumerate(self.buckets):
            row = [bucket.label, str(bucket.count)]
            for name in self.systems:
                value = self.bucket_scores[name][index]
                shown = f"{value.score:.2f} [{value.low:.2f}, {value.high:.2f}]"
                row.append(shown if bucket.count else "-")
            rows.append(row)
        return head, rows

    def rule_line(self) -> str:
        return (
            f"± : half-width of the 95% bootstrap interval ({self.settings['resamples']} "
            f"resamples); p: paired bootstrap (bs) and approximate randomization (ar, "
            f"{self.settings['trials']} trials) against {self.baseline}; * p < {ALPHA}; "
            f"{', '.join(sorted(LOWER_IS_BETTER & set(self.metrics))) or 'no metric'} lower is "
            "better."
        )

    def figure(self) -> "Figure":
        """The bucket metric by length: one line per system with its 95% band."""
        from matplotlib.figure import Figure

        figure = Figure(figsize=(6.0, 3.8), layout="constrained")
        ax = figure.subplots()
        positions = list(range(len(self.buckets)))
        empty = [bucket.count == 0 for bucket in self.buckets]  # gaps in the lines
        for name in self.systems:
            row = self.bucket_scores[name]

            def points(values: list[float]) -> list[float]:
                return [math.nan if gap else v for v, gap in zip(values, empty, strict=True)]

            scores = points([v.score for v in row])
            spread = [[s - v.low for s, v in zip(scores, row, strict=True)],
                      [v.high - s for s, v in zip(scores, row, strict=True)]]  # fmt: skip
            ax.errorbar(positions, scores, yerr=spread, marker="o", capsize=3, label=name)
            ax.fill_between(positions, points([v.low for v in row]),
                            points([v.high for v in row]), alpha=0.2)  # fmt: skip
        ax.set_xticks(positions, [f"{b.label}\n(n={b.count})" for b in self.buckets])
        ax.set_xlabel(f"{self.bucket_by} length ({self.bucket_unit})")
        ax.set_ylabel(self.bucket_metric)
        ax.set_title(f"{self.bucket_metric} by {self.bucket_by} length, 95% bootstrap bands")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        return figure

    def save_figure(self, path: str | Path) -> Path:
        """Write `figure()` to `path` (png/svg/pdf by suffix), atomically."""
        from attnseq.analysis.figures import save_figure

        return save_figure(self.figure(), path)


def _p(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" + ("*" if value < ALPHA else "")


def _table(head: list[str], rows: list[list[str]], output_format: str) -> str:
    if output_format == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    if output_format == "latex":

        def cell(text: str) -> str:
            return text.replace("±", r"$\pm$").replace("_", r"\_").replace("%", r"\%")

        lines = [r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule"]
        lines.append(" & ".join(cell(h) for h in head) + r" \\")
        lines.append(r"\midrule")
        lines += [" & ".join(cell(c) for c in row) + r" \\" for row in rows]
        return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"])
    widths = [max(len(str(c)) for c in column) for column in zip(head, *rows, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in (head, *rows)]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def compare_systems(
    systems: Sequence[System],
    baseline: str | None = None,
    references: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    task: str | None = None,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    trials: int = DEFAULT_TRIALS,
    edges: Sequence[int] | None = None,
) -> Comparison:
    """Compare `systems` with `baseline` (a system's name; default the first): the tests, the
    buckets and the length ratios (module docstring). `references` default: those an eval
    folder among the systems brings; `task` default: the eval records', else translation."""
    check_test_sizes(seed, resamples, trials)
    if len(systems) < 2:
        raise UserError(f"comparing needs at least two systems, got {len(systems)}")
    names = [system.name for system in systems]
    if len(set(names)) != len(names):
        raise UserError(f"a system is given twice: {names}")
    baseline = baseline if baseline is not None else names[0]
    if baseline not in names:
        raise UserError(f"baseline {baseline!r} is not among the systems: {', '.join(names)}")
    references = _references(systems, references)
    if sources is None:
        sources = _sources(systems, len(references))
    _check_lengths(systems, references, sources)
    task = task or next((s.task for s in systems if s.task), None) or "translation"
    if task not in TASK_TESTED_METRICS:
        raise UserError(f"unknown task {task!r}; valid: {', '.join(TASK_TESTED_METRICS)}")
    metrics = list(TASK_TESTED_METRICS[task])
    order = [baseline, *[name for name in names if name != baseline]]
    outputs = {system.name: system.hypotheses for system in systems}
    outputs = {name: outputs[name] for name in order}
    scores = paired_tests(outputs, references, metrics, seed, resamples, trials)
    by = "source" if sources is not None else "reference"
    measured = sources if sources is not None else references
    unit = length_unit(measured)
    buckets, bucket_scores = length_buckets(
        measured, outputs, references, metrics[0], edges, seed, resamples, unit
    )
    ratios = {name: length_ratio(outputs[name], references) for name in order}
    settings = {"seed": seed, "resamples": resamples, "trials": trials, "alpha": ALPHA}
    return Comparison(
        order, baseline, task, metrics, scores, metrics[0], by, unit, buckets, bucket_scores,
        ratios, len(references), settings,
    )  # fmt: skip


def _sources(systems: Sequence[System], count: int) -> list[str] | None:
    """The source texts of the first system evaluated on a dataset split that this machine
    can read (one per reference); None when there is none."""
    for system in systems:
        if system.checkpoint is not None and system.split is not None:
            sources = split_sources(system.checkpoint, system.split)
            if sources is not None and len(sources) == count:
                return sources
    return None


def _references(systems: Sequence[System], given: Sequence[str] | None) -> list[str]:
    if given is not None:
        return list(given)
    for system in systems:
        if system.references is not None:
            return system.references
    raise UserError(
        "no references: give a reference file, or compare an eval result folder or a checkpoint"
    )


def _check_lengths(
    systems: Sequence[System], references: Sequence[str], sources: Sequence[str] | None
) -> None:
    """UserError when a system, its own references or the sources differ in lines."""
    if not references:
        raise UserError("the references are empty: nothing to compare")
    for system in systems:
        if len(system.hypotheses) != len(references):
            raise UserError(
                f"{system.name}: {len(system.hypotheses)} lines but the references have "
                f"{len(references)}: a system gives one output per reference"
            )
        if system.references is not None and system.references != list(references):
            raise UserError(f"{system.name}: its references differ from the others'")
    if sources is not None and len(sources) != len(references):
        raise UserError(f"{len(sources)} sources but {len(references)} references")
