"""Is B better than A? Single systems (hypothesis files, eval result folders, checkpoints,
Hugging Face models) compared with a baseline on one test set: the `Comparison`, its tables and
its figure. The pipeline: docs/internals/evaluation.md."""

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnseq.analysis.compared_attention import Gold, SystemAttention, system_attention
from attnseq.analysis.tables import TABLE_FORMATS, p_value_cell, render_table
from attnseq.errors import UserError
from attnseq.evaluation.buckets import (
    RATIO_EDGES,
    Bucket,
    BucketScore,
    bucket_members,
    length_buckets,
    length_ratio,
    length_unit,
    ratio_bucket_counts,
    ratio_labels,
)
from attnseq.evaluation.significance import (
    ALPHA,
    DEFAULT_RESAMPLING,
    LOWER_IS_BETTER,
    TASK_TESTED_METRICS,
    MetricScore,
    Resampling,
    metric_scores,
)
from attnseq.evaluation.word_accuracy import WordScore, word_accuracy_by_frequency, word_frequencies
from attnseq.io.hf_hub import is_hub_id

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = (*TABLE_FORMATS, "json")
# what messages call the arguments of `compare_systems` that a note may name; a command passes
# its options
ARGUMENT_NAMES = {
    "baseline": "baseline",
    "sources": "sources",
    "train_references": "train_references",
    "gold": "gold",
    "no_attention": "attention=False",
}


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
    pairs = split_pairs(checkpoint, split)
    return None if pairs is None else [source for source, _ in pairs]


def split_pairs(checkpoint: Path, split: str) -> list[tuple[str, str]] | None:
    """The (source, target) texts of a dataset split of the checkpoint's data, as training
    and evaluation read it (kept examples, in order; a generated task regenerated from the
    run's seed); None when the checkpoint or the split cannot be read here."""
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
        return list(data.pairs[split])
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


def pretrained_system(path: Path, name: str, split: str, device: str) -> System:
    """A system from a Hugging Face model folder or hf:ORG/NAME (models/pretrained.py): its
    eval result on `split`, made."""
    from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint

    folder = evaluate_checkpoint(path, split, device_name=device).result.folder
    return eval_folder_system(folder, name)


def load_system(path: str | Path, split: str = "test", device: str = "auto") -> System:
    """The system at `path`, named by its path as given: a hypothesis file, an eval result
    folder (its refs.txt the references), a checkpoint or run directory (its
    checkpoints/best.pt), whose eval result on `split` with the checkpoint's own decoding
    settings is reused when RUN/eval holds it, else made (`checkpoint_system`), or a Hugging
    Face model folder or hf:ORG/NAME, whose eval result is made (`pretrained_system`)."""
    path = Path(path)
    name = str(path)
    if path.is_dir() and (path / "hyps.txt").is_file() and (path / "metrics.json").is_file():
        return eval_folder_system(path, name)
    if path.is_dir() and (path / "checkpoints").is_dir():
        return checkpoint_system(path, name, split, device)
    if is_hub_id(path) or (path.is_dir() and (path / "config.json").is_file()):
        return pretrained_system(path, name, split, device)
    if path.is_dir():
        raise UserError(
            f"{path}: not a system (a hypothesis file, an eval result folder, a run "
            "directory, a checkpoint or a Hugging Face model folder)"
        )
    if path.suffix == ".pt":
        return checkpoint_system(path, name, split, device)
    return System(name, read_lines(path, "hypothesis file"), path=path)


@dataclass
class WordTable:
    """Word F-measure by training frequency (word_accuracy.py): the frequency buckets (count:
    reference words in each), each system's scores per bucket, and whose training targets the
    frequencies count."""

    buckets: list[Bucket]
    scores: dict[str, list[WordScore]]
    frequencies_from: str


@dataclass
class Comparison:
    """The result of comparing systems with a baseline (`compare_systems`): per system and
    metric a MetricScore; the length buckets of `bucket_metric` with each system's scores and
    intervals; each system's output/reference length ratio and its sentences per length-ratio
    bucket (`ratio_counts`, buckets `ratio_labels()`); word F-measure by training frequency
    (None when there are no training targets); the attention measures of each system (empty
    when none was asked for or possible); one line per table left out (`notes`); and how it
    was computed."""

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
    ratio_counts: dict[str, list[int]] = field(default_factory=dict)
    words: WordTable | None = None
    attention: dict[str, SystemAttention] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

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
        } | self.breakdown_dict()

    def breakdown_dict(self) -> dict[str, Any]:
        """The length-ratio buckets, the word accuracy, the attention measures and the notes,
        as JSON-ready values."""
        shares = {
            name: [count / self.sentences for count in counts]
            for name, counts in self.ratio_counts.items()
        }
        ratios = {
            "edges": [float(edge) for edge in RATIO_EDGES],
            "buckets": ratio_labels(),
            "counts": self.ratio_counts,
            "shares": shares,
        }
        words = None
        if self.words is not None:
            words = {
                "frequencies_from": self.words.frequencies_from,
                "buckets": [
                    {"frequency": bucket.label, "reference_words": bucket.count}
                    for bucket in self.words.buckets
                ],
                "scores": {
                    name: [asdict(score) for score in row]
                    for name, row in self.words.scores.items()
                },
            }
        attention = {name: asdict(value) for name, value in self.attention.items()}
        return {
            "length_ratio_buckets": ratios,
            "word_accuracy": words,
            "attention": attention or None,
            "notes": self.notes,
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
            render_table(head, rows, output_format),
            self.rule_line(),
            "",
            f"{self.bucket_metric} by {self.bucket_by} length ({self.bucket_unit}), 95% interval:",
            render_table(bucket_head, bucket_rows, output_format),
            *self.breakdown_parts(output_format),
        ]
        return "\n".join(parts) + "\n"

    def breakdown_parts(self, output_format: str) -> list[str]:
        """The length-ratio, word-accuracy and attention tables with their headings, and the
        notes, as lines of `render`."""
        parts = [
            "",
            f"sentences by output/reference length ratio (words), of {self.sentences}:",
            render_table(*self.ratio_rows(), output_format),
        ]
        if self.words is not None:
            origin = self.words.frequencies_from
            heading = f"word F-measure (precision/recall) by frequency in {origin}:"
            parts += ["", heading, render_table(*self.word_rows(), output_format)]
        if self.attention:
            gold = self.settings.get("gold")
            heading = (
                "cross-attention entropy (nats), mean over the rows of each system's outputs "
                f"teacher-forced, overall and by {self.bucket_by} length ({self.bucket_unit})"
            )
            heading += f"; AER against {gold}:" if gold else ":"
            parts += ["", heading, render_table(*self.attention_rows(), output_format)]
            reasons = [
                f"no attention measure for {name}: {value.reason}"
                if value.reason is not None
                else f"no AER for {name}: {value.aer_reason}"
                for name, value in self.attention.items()
                if value.reason is not None or value.aer_reason is not None
            ]
            parts += [""] + reasons if reasons else []  # a blank line ends a markdown table
        return parts + ([""] + self.notes if self.notes else [])

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
                score, spread = f"{value.score:.{digits}f}", f"{value.ci:.{digits}f}"
                p_values = [p_value_cell(value.p_bootstrap), p_value_cell(value.p_randomization)]
                rows.append([metric, shown, score, spread, *p_values])
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

    def ratio_rows(self) -> tuple[list[str], list[list[str]]]:
        """One row per system: its corpus length ratio, then its sentences (and their share)
        in each length-ratio bucket."""
        head = ["system", "ratio", *ratio_labels()]
        rows = []
        for name in self.systems:
            counts = [f"{n} ({100 * n / self.sentences:.1f}%)" for n in self.ratio_counts[name]]
            rows.append([name, f"{self.length_ratios[name]:.3f}", *counts])
        return head, rows

    def word_rows(self) -> tuple[list[str], list[list[str]]]:
        """One row per training-frequency bucket: its reference words, then each system's
        F-measure (precision/recall) of the bucket's words."""
        assert self.words is not None
        head = ["frequency", "ref words", *self.systems]
        rows = []
        for index, bucket in enumerate(self.words.buckets):
            row = [bucket.label, str(bucket.count)]
            for name in self.systems:
                value = self.words.scores[name][index]
                shown = f"{value.f_measure:.3f} ({value.precision:.3f}/{value.recall:.3f})"
                row.append(shown if bucket.count or value.outputs else "-")
            rows.append(row)
        return head, rows

    def attention_rows(self) -> tuple[list[str], list[list[str]]]:
        """One row per system: its mean entropy, per length bucket, and its AER with gold."""
        gold = self.settings.get("gold") is not None
        head = ["system", "entropy", *[bucket.label for bucket in self.buckets]]
        head += ["AER"] if gold else []
        rows = []
        for name in self.systems:
            value = self.attention[name]
            buckets = value.bucket_entropy or [None] * len(self.buckets)
            row = [name, *[_number(v, 3) for v in (value.entropy, *buckets)]]
            row += [_number(value.aer["aer"] if value.aer else None, 4)] if gold else []
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
        """The bucket metric by length: one line per system with its 95% band; beside it, with
        training frequencies, the word F-measure by frequency (`word_panel`)."""
        from matplotlib.figure import Figure

        panels = 1 if self.words is None else 2
        figure = Figure(figsize=(6.0 * panels, 3.8), layout="constrained")
        ax, *others = figure.subplots(1, panels, squeeze=False)[0]
        positions = list(range(len(self.buckets)))
        empty = [bucket.count == 0 for bucket in self.buckets]  # gaps in the lines
        for name in self.systems:
            row = self.bucket_scores[name]

            def points(values: list[float]) -> list[float]:
                return [math.nan if gap else v for v, gap in zip(values, empty, strict=True)]

            scores = points([v.score for v in row])
            # a percentile interval need not hold the score itself (few sentences, a skewed
            # metric): the bar then stops at the score on that side
            spread = [
                [max(0.0, s - v.low) for s, v in zip(scores, row, strict=True)],
                [max(0.0, v.high - s) for s, v in zip(scores, row, strict=True)],
            ]
            ax.errorbar(positions, scores, yerr=spread, marker="o", capsize=3, label=name)
            ax.fill_between(
                positions, points([v.low for v in row]), points([v.high for v in row]), alpha=0.2
            )
        ax.set_xticks(positions, [f"{b.label}\n(n={b.count})" for b in self.buckets])
        ax.set_xlabel(f"{self.bucket_by} length ({self.bucket_unit})")
        ax.set_ylabel(self.bucket_metric)
        ax.set_title(f"{self.bucket_metric} by {self.bucket_by} length, 95% bootstrap bands")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        if others:
            self.word_panel(others[0])
        return figure

    def word_panel(self, ax: Any) -> None:
        """Word F-measure by training frequency on `ax`: one line per system, a gap at a
        bucket with no reference words."""
        assert self.words is not None
        buckets = self.words.buckets
        positions = list(range(len(buckets)))
        for name in self.systems:
            scores = zip(self.words.scores[name], buckets, strict=True)
            values = [score.f_measure if bucket.count else math.nan for score, bucket in scores]
            ax.plot(positions, values, marker="o", label=name)
        ax.set_xticks(positions, [f"{b.label}\n(n={b.count})" for b in buckets], fontsize=8)
        label = f"frequency in {self.words.frequencies_from} (n: reference words)"
        ax.set_xlabel(textwrap.fill(label, width=70))  # a run's path can be long
        ax.set_ylabel("word F-measure")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("word F-measure by training frequency")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)

    def save_figure(self, path: str | Path) -> Path:
        """Write `figure()` to `path` (png/svg/pdf by suffix), atomically."""
        from attnseq.analysis.figures import save_figure

        return save_figure(self.figure(), path)


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def compare_systems(
    systems: Sequence[System],
    baseline: str | None = None,
    references: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    task: str | None = None,
    resampling: Resampling = DEFAULT_RESAMPLING,
    edges: Sequence[int] | None = None,
    train_references: Sequence[str] | None = None,
    gold: Path | None = None,
    attention: bool = True,
    device: str = "auto",
    names: Mapping[str, str] | None = None,
) -> Comparison:
    """Compare `systems` with `baseline` (a system's name; default the first): the paired
    tests, drawn as `resampling` says, the length buckets (`edges`: their lower edges) and
    the length ratios. `references` default: those an eval folder among the systems brings;
    `task` default: the eval records', else translation. `train_references`: the training
    targets the word frequencies count (default: those of the first checkpoint system's
    data); `gold`: a Pharaoh or NAACL file of (source word, reference word) links of the test
    set, for the AER of the attention; `attention`: measure the checkpoint systems' attention,
    on `device`; `names`: what notes and messages call these arguments (`ARGUMENT_NAMES`)."""
    called = ARGUMENT_NAMES | dict(names or {})
    check_extras(train_references, gold, attention, called)
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
    links = _gold_links(gold, sources, references, called)  # read before the work
    task = task or next((s.task for s in systems if s.task), None) or "translation"
    if task not in TASK_TESTED_METRICS:
        raise UserError(f"unknown task {task!r}; valid: {', '.join(TASK_TESTED_METRICS)}")
    metrics = list(TASK_TESTED_METRICS[task])
    order = [baseline, *[name for name in names if name != baseline]]
    outputs = {system.name: system.hypotheses for system in systems}
    outputs = {name: outputs[name] for name in order}
    scores = metric_scores(outputs, references, metrics, resampling)
    by = "source" if sources is not None else "reference"
    measured = sources if sources is not None else references
    unit = length_unit(measured)
    buckets, bucket_scores = length_buckets(
        measured, outputs, references, metrics[0], edges, resampling, unit
    )
    ratios = {name: length_ratio(outputs[name], references) for name in order}
    settings = {**asdict(resampling), "alpha": ALPHA, "gold": None if gold is None else str(gold)}
    result = Comparison(
        systems=order,
        baseline=baseline,
        task=task,
        metrics=metrics,
        scores=scores,
        bucket_metric=metrics[0],
        bucket_by=by,
        bucket_unit=unit,
        buckets=buckets,
        bucket_scores=bucket_scores,
        length_ratios=ratios,
        sentences=len(references),
        settings=settings,
    )
    result.ratio_counts = {name: ratio_bucket_counts(outputs[name], references) for name in order}
    result.words = _word_table(systems, outputs, references, train_references, result.notes, called)
    if attention:
        members = [bucket_members(measured, bucket, unit) for bucket in buckets]
        result.attention = _attention(
            systems, order, sources, references, members, links, device, result.notes
        )
    return result


def check_extras(
    train_references: Sequence[str] | None,
    gold: Path | None,
    attention: bool,
    names: Mapping[str, str] = ARGUMENT_NAMES,
) -> None:
    """UserError for training references without a word, or gold links with the attention
    left out; `names`: what the messages call the arguments (`ARGUMENT_NAMES`)."""
    if train_references is not None and not any(line.split() for line in train_references):
        raise UserError(
            f"{names['train_references']} holds no words: the training targets whose word "
            "frequencies bucket the reference words"
        )
    if gold is not None and not attention:
        raise UserError(
            f"{names['gold']} scores the attention that {names['no_attention']} leaves out"
        )


def _word_table(
    systems: Sequence[System],
    outputs: Mapping[str, Sequence[str]],
    references: Sequence[str],
    train_references: Sequence[str] | None,
    notes: list[str],
    names: Mapping[str, str],
) -> WordTable | None:
    """Word F-measure by frequency in the given training targets, else in those of the first
    checkpoint system whose training split this machine reads; None, with a note, without."""
    if train_references is not None:
        targets, origin = list(train_references), "the given training targets"
    else:
        targets, origin = None, ""
        for system in systems:
            pairs = split_pairs(system.checkpoint, "train") if system.checkpoint else None
            if pairs:
                targets, origin = [target for _, target in pairs], "the training targets of "
                origin += system.name
                break
    if targets is None:
        notes.append(
            "word F-measure by training frequency: left out, no training targets (give "
            f"{names['train_references']}, or compare a checkpoint whose training data this "
            "machine can read)"
        )
        return None
    buckets, scores = word_accuracy_by_frequency(outputs, references, word_frequencies(targets))
    return WordTable(buckets, scores, origin)


def _gold_links(
    gold: Path | None,
    sources: Sequence[str] | None,
    references: Sequence[str],
    names: Mapping[str, str],
) -> Gold | None:
    """The (sure, possible) (source word, reference word) links of `gold`, checked against the
    words of each pair; None without gold."""
    from attnseq.data.word_alignments import read_gold_links, read_text_lines

    if gold is None:
        return None
    what = f"{names['gold']} {gold}"
    if sources is None:
        raise UserError(
            f"{what}: gold links count the words of the test sources: give {names['sources']}, "
            "or compare a checkpoint whose test split this machine can read"
        )
    read_text_lines(gold, names["gold"])  # exists, is UTF-8
    return read_gold_links(
        gold,
        possible=None,
        gold_format="auto",
        order="src-tgt",
        src_lines=sources,
        tgt_lines=references,
        what=what,
        order_option="the links' order",
    )


def _attention(
    systems: Sequence[System],
    order: Sequence[str],
    sources: Sequence[str] | None,
    references: Sequence[str],
    members: Sequence[Any],
    gold: Gold | None,
    device: str,
    notes: list[str],
) -> dict[str, SystemAttention]:
    """Each system's attention measures (compared_attention.py), in the table's order; {} with
    a note when no system is a checkpoint."""
    if all(system.checkpoint is None for system in systems):
        notes.append(
            "attention: left out, no system is a checkpoint (hypothesis files have "
            "no model whose attention could be read)"
        )
        return {}
    by_name = {system.name: system for system in systems}
    measures = {}
    for name in order:
        system = by_name[name]
        measures[name] = system_attention(
            system.checkpoint, system.hypotheses, sources, references, members, gold, device
        )
    return measures


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
            raise UserError(
                f"{system.name}: its references differ from the others': paired tests need one "
                "test set (a generated task draws it from the run's seed: compare runs of one "
                "seed, or a sweep folder to pool seeds)"
            )
    if sources is not None and len(sources) != len(references):
        raise UserError(f"{len(sources)} sources but {len(references)} references")
