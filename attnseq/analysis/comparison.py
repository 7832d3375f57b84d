"""Is B better than A? Single systems (hypothesis files, eval result folders, checkpoints,
Hugging Face models) compared with a baseline on one test set: the `Comparison`, its tables and
its figure; and what every comparison writes (`ComparisonResult`). The pipeline:
docs/internals/evaluation.md."""

import json
import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnseq.analysis.compared_attention import Gold, SystemAttention, system_attention
from attnseq.analysis.tables import TABLE_FORMATS, p_value_cell, render_table
from attnseq.data.file_readers import text_lines
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
from attnseq.evaluation.metrics import SACREBLEU_METRICS, sacrebleu_signature
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
from attnseq.io.atomic import atomic_write_text
from attnseq.io.hf_hub import is_hub_id
from attnseq.io.user_paths import (
    InputPaths,
    check_output_file,
    check_output_folder,
    image_suffixes,
    refuse_output_over_inputs,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = (*TABLE_FORMATS, "json")
# what messages call the arguments of `compare_paths` and `compare_systems`; a command passes
# its options
ARGUMENT_NAMES = {
    "systems": "system",
    "baseline": "baseline",
    "references": "references",
    "sources": "sources",
    "train_references": "train_references",
    "gold": "gold",
    "no_attention": "attention=False",
    "seed": "seed",
    "resamples": "resamples",
    "trials": "trials",
    "buckets": "buckets",
    "beam": "beam",
    "length_penalty": "length_penalty",
}
# What a comparison of single systems tests, and what it cannot: said beside its p-values.
SCOPE = (
    "one run per system: these tests resample the test sentences, not the training; to say "
    "that one method beats another, train each with several seeds and compare the sweep "
    "folder (configurations over seeds)"
)
SIGNATURE_NAMES = {"bleu": "BLEU", "chrf": "chrF", "ter": "TER"}  # as sacreBLEU prints them
HYPOTHESIS_FILE, EVAL_RESULT, CHECKPOINT = "hypothesis file", "eval result", "checkpoint"


@dataclass(frozen=True)
class SystemDecoding:
    """How a system's outputs were made: `kind` (HYPOTHESIS_FILE, EVAL_RESULT or CHECKPOINT),
    the decoding's name as eval names it (`decoding_name`; None when unknown), the eval result
    folder the outputs are read from, and for a checkpoint whether that result was reused
    (False: decoded by this comparison)."""

    kind: str
    name: str | None = None
    eval_folder: str | None = None
    reused: bool | None = None

    def text(self) -> str:
        if self.kind == HYPOTHESIS_FILE:
            return "a hypothesis file (its decoding unknown)"
        text = f"{self.name or 'decoding unknown'}, the eval result {self.eval_folder}"
        if self.reused is not None:
            text += " (reused)" if self.reused else " (decoded now)"
        return text


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
    decoding: SystemDecoding = SystemDecoding(HYPOTHESIS_FILE)

    def files(self) -> list[tuple[str, Path]]:
        """(what, path) of every file the system was read from."""
        if self.path is None:
            return []
        if self.decoding.kind == HYPOTHESIS_FILE:
            return [(f"system {self.name}", self.path)]
        found = [(f"eval result of {self.name}", self.path / name) for name in RESULT_READ]
        return found + (
            [(f"checkpoint of {self.name}", self.checkpoint)] if self.checkpoint else []
        )


RESULT_READ = ("metrics.json", "hyps.txt", "refs.txt")  # the files of an eval result read


def read_lines(path: Path, what: str) -> list[str]:
    """The lines of a UTF-8 text file as the data readers count them (`text_lines`: only "\\n"
    ends a line, as `wc -l` counts), or a UserError naming it as `what` ("hypothesis file",
    "--ref file") and saying what it is instead of a text file."""
    return text_lines(Path(path), what)


def _task_of(record: Mapping[str, Any]) -> str | None:
    keys = [key.split("/", 1)[-1] for key in record]
    if "rouge1" in keys:
        return "summarization"
    if "bleu" in keys:
        return "translation"
    return None


def eval_folder_system(folder: Path, name: str, reused: bool | None = None) -> System:
    """A system from an `attnseq eval` result folder (its metrics.json checked,
    checkpoint_eval.read_record); `reused`: the folder is a checkpoint system's result, found
    (True) or made now (False)."""
    from attnseq.evaluation.checkpoint_eval import read_record, record_decoding_name

    record = read_record(folder / "metrics.json")
    hypotheses = read_lines(folder / "hyps.txt", "eval result file")
    references = read_lines(folder / "refs.txt", "eval result file")
    checkpoint = Path(record["checkpoint"]) if record.get("checkpoint") else None
    kind = EVAL_RESULT if reused is None else CHECKPOINT
    decoding = SystemDecoding(kind, record_decoding_name(record), str(folder), reused)
    task = _task_of(record)
    return System(
        name, hypotheses, references, task, folder, checkpoint, record.get("split"), decoding
    )


def split_sources(checkpoint: Path, split: str) -> list[str] | None:
    """The source texts of a dataset split of the checkpoint's data, as evaluation reads it
    (kept examples, in order); None when the checkpoint or the split cannot be read here."""
    pairs = split_pairs(checkpoint, split)
    return None if pairs is None else [source for source, _ in pairs]


def split_pairs(checkpoint: Path, split: str) -> list[tuple[str, str]] | None:
    """The (source, target) texts of a dataset split of the checkpoint's data, as training
    and evaluation read it (kept examples, in order; a generated task regenerated from the
    run's seed); None when the checkpoint or the split cannot be read here (`read_split`)."""
    return read_split(checkpoint, split)[0]


def read_split(checkpoint: Path, split: str) -> tuple[list[tuple[str, str]] | None, str]:
    """(pairs, "") of `split_pairs`, or (None, why not): the checkpoint is no regular file
    here, its data is not on this machine, or eval's rules refuse where its config points
    (checkpoint_eval.checkpoint_data: no location outside the data root, no download)."""
    from attnseq.config.conversion import config_from_dict
    from attnseq.data.tokenizers import TokenizerPair
    from attnseq.evaluation.checkpoint_eval import checkpoint_data
    from attnseq.io.checkpoint import load_checkpoint

    if not checkpoint.is_file():
        return None, f"the checkpoint {checkpoint} is not on this machine"
    try:
        payload = load_checkpoint(checkpoint)
        cfg = config_from_dict(payload["config"])
        tokenizers = TokenizerPair.from_state(payload["tokenizers"])
        data = checkpoint_data(cfg, tokenizers, [split], overridable=False)
        return list(data.pairs[split]), ""
    except (UserError, KeyError, OSError) as error:  # a file split, data not here, refused
        return None, f"{checkpoint}: {error}".rstrip()


def existing_eval(
    checkpoint: Path, split: str, changes: Mapping[str, Any] | None = None
) -> Path | None:
    """The eval result folder of `checkpoint` on `split` with its own decoding settings
    (`changes` of them, as eval's decoding options make) and no overrides that change a
    result (checkpoint_eval.result_overrides), when RUN/eval (checkpoint_eval.default_root)
    holds it complete. UserError when its metrics.json is damaged."""
    from attnseq.config.conversion import config_from_dict
    from attnseq.decoding.settings import with_changes
    from attnseq.evaluation.checkpoint_eval import (
        checkpoint_step,
        default_root,
        read_record,
        result_folder,
        result_overrides,
    )
    from attnseq.io.checkpoint import load_checkpoint

    payload = load_checkpoint(checkpoint)
    try:
        decoding = with_changes(config_from_dict(payload["config"]).decoding, changes or {})
    except Exception:  # not a config this version reads: decode, which says what is wrong
        return None
    folder = result_folder(
        default_root(checkpoint), checkpoint, checkpoint_step(payload), split, decoding
    )
    if not (folder / "metrics.json").is_file():
        return None
    try:
        record = read_record(folder / "metrics.json")
    except UserError as error:
        raise UserError(f"{error}; remove {folder} to decode the run again") from None
    changed = result_overrides(record.get("overrides") or [])  # trainer.threads changes nothing
    same = record.get("checkpoint") == str(checkpoint.resolve()) and not changed
    return folder if same and record.get("split") == split else None


@dataclass(frozen=True)
class Decode:
    """How the checkpoint systems of a comparison are decoded: the split, the device, the
    changes of each checkpoint's decoding settings (setting -> value, as eval takes them), and
    (what, path) of the caller's files that a new eval result must not replace."""

    split: str = "test"
    device: str = "auto"
    changes: Mapping[str, Any] = field(default_factory=dict)
    keep: tuple[tuple[str, Path], ...] = ()


def checkpoint_system(path: Path, name: str, decode: Decode) -> System:
    """A system from a checkpoint or run directory: its eval result on `decode.split`, reused
    or made."""
    from attnseq.io.user_paths import check_input_file

    checkpoint = path / "checkpoints" / "best.pt" if path.is_dir() else path
    if path.is_dir() and not checkpoint.is_file():
        raise UserError(f"checkpoint {path}: a run directory without checkpoints/best.pt")
    check_input_file(checkpoint, "checkpoint")
    folder = existing_eval(checkpoint, decode.split, decode.changes)
    if folder is not None:
        return eval_folder_system(folder, name, reused=True)
    return evaluated_system(checkpoint, name, decode)


def evaluated_system(path: Path, name: str, decode: Decode) -> System:
    """A system from the eval result, made now, of a checkpoint or a Hugging Face model folder
    or hf:ORG/NAME (models/pretrained.py) on `decode.split`."""
    from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint

    evaluated = evaluate_checkpoint(
        path,
        decode.split,
        device_name=decode.device,
        decoding=decode.changes,
        keep=decode.keep,
    )
    return eval_folder_system(evaluated.result.folder, name, reused=False)


def load_system(path: str | Path, decode: Decode = Decode()) -> System:
    """The system at `path`, named by its path as given: a hypothesis file, an eval result
    folder (its refs.txt the references), a checkpoint or run directory (its
    checkpoints/best.pt), whose eval result on `decode.split` with the checkpoint's own
    decoding settings (and `decode.changes`) is reused when RUN/eval holds it, else made
    (`checkpoint_system`), or a Hugging Face model folder or hf:ORG/NAME, whose eval result is
    made (`evaluated_system`)."""
    path = Path(path)
    name = str(path)
    if path.is_dir() and (path / "hyps.txt").is_file() and (path / "metrics.json").is_file():
        return eval_folder_system(path, name)
    if path.is_dir() and (path / "checkpoints").is_dir():
        return checkpoint_system(path, name, decode)
    if is_pretrained(path):
        return evaluated_system(path, name, decode)
    if path.is_dir():
        raise UserError(
            f"{path}: not a system (a hypothesis file, an eval result folder, a run "
            "directory, a checkpoint or a Hugging Face model folder) nor a sweep folder (run "
            "directories a few levels below it)"
        )
    if path.suffix == ".pt":
        return checkpoint_system(path, name, decode)
    return System(name, read_lines(path, "hypothesis file"), path=path)


def is_pretrained(path: Path) -> bool:
    """Whether `path` names a Hugging Face model: hf:ORG/NAME or a folder with config.json."""
    return is_hub_id(path) or (path.is_dir() and (path / "config.json").is_file())


def decodes(path: Path) -> bool:
    """Whether the system at `path` is decoded here: a run directory, a checkpoint or a
    Hugging Face model."""
    return (
        (path / "checkpoints").is_dir()
        or path.suffix == ".pt"
        and not path.is_dir()
        or is_pretrained(path)
    )


def system_identity(path: Path) -> tuple[int, int] | Path:
    """What the system at `path` is as the file system sees it, whatever the spelling (a
    symbolic link, a hard link, `..`): the device and inode of what it reads (a run
    directory's checkpoints/best.pt), else the path resolved."""
    path = Path(path)
    target = path / "checkpoints" / "best.pt" if (path / "checkpoints").is_dir() else path
    try:
        info = os.stat(target)
        return info.st_dev, info.st_ino
    except OSError:
        try:
            return path.resolve()
        except (OSError, RuntimeError):  # a symbolic link that loops
            return path.absolute()


@dataclass
class ComparisonResult:
    """What every comparison writes: its figure and its JSON (`save`), never over a file it
    read (`inputs`: (what, path) of each, as the comparison found them)."""

    inputs: list[tuple[str, Path]] = field(
        default_factory=list, kw_only=True, repr=False, compare=False
    )

    def figure(self) -> "Figure":
        raise NotImplementedError

    def render(self, output_format: str = "text") -> str:
        raise NotImplementedError

    def save_figure(self, path: str | Path, name: str = "path") -> Path:
        """Write `figure()` to `path` (png/svg/pdf by suffix), atomically; UserError, before
        drawing, for a folder, a suffix matplotlib cannot write, a folder that cannot be
        written or one of the comparison's inputs. `name`: what the messages call `path`."""
        from attnseq.analysis.figures import save_figure

        path = Path(path)
        check_output_file(path, name, image_suffixes())
        refuse_output_over_inputs(path, name, self.inputs)
        return save_figure(self.figure(), path)

    def save(self, folder: str | Path, name: str = "folder") -> tuple[Path, Path]:
        """Write the figure and the JSON (`render("json")`) into `folder` as compare.png and
        compare.json, each atomically, after checking both against the inputs."""
        folder = Path(folder)
        check_output_folder(folder, name)
        figure, record = folder / "compare.png", folder / "compare.json"
        for path in (figure, record):
            refuse_output_over_inputs(path, name, self.inputs)
            check_output_file(path, name)
        self.save_figure(figure, name)
        atomic_write_text(record, self.render("json"))
        return figure, record


def check_outputs(folder: Path, name: str, inputs: InputPaths) -> None:
    """UserError, before any work, when `folder` cannot take a comparison's files or one of
    them would replace one of `inputs`."""
    check_output_folder(folder, name)
    for output in ("compare.png", "compare.json"):
        refuse_output_over_inputs(folder / output, name, inputs)
        check_output_file(folder / output, name)


@dataclass
class WordTable:
    """Word F-measure by training frequency (word_accuracy.py): the frequency buckets (count:
    reference words in each), each system's scores per bucket, and whose training targets the
    frequencies count."""

    buckets: list[Bucket]
    scores: dict[str, list[WordScore]]
    frequencies_from: str


@dataclass
class Comparison(ComparisonResult):
    """The result of comparing systems with a baseline (`compare_systems`): per system and
    metric a MetricScore; the length buckets of `bucket_metric` with each system's scores and
    intervals; each system's output/reference length ratio and its sentences per length-ratio
    bucket (`ratio_counts`, buckets `ratio_labels()`); word F-measure by training frequency
    (None when there are no training targets); the attention measures of each system (empty
    when none was asked for or possible); one line per table left out (`notes`); and what
    was compared and how: the test set (`test_set`: its sentences, split and references),
    each system's decoding, the metrics' sacreBLEU signatures and the resampling
    (`settings`)."""

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
    test_set: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, SystemDecoding] = field(default_factory=dict)
    signatures: dict[str, str] = field(default_factory=dict)

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
            "test_set": self.test_set,
            "decoding": {name: asdict(value) for name, value in self.decoding.items()},
            "signatures": self.signatures,
            "scope": SCOPE,
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
            SCOPE,
            "",
            *self.work_lines(),
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

    def work_lines(self) -> list[str]:
        """What was compared and how: the test set, each system's decoding, the signatures of
        the sacreBLEU metrics."""
        split = self.test_set.get("split")
        lines = [
            f"test set: {f'the {split} split, ' if split else ''}{self.sentences} sentences, "
            f"references {self.test_set.get('references') or 'given'}",
            "decoding:",
            *(f"  {name}: {self.decoding[name].text()}" for name in self.systems),
        ]
        if self.signatures:
            lines.append("signatures (sacreBLEU):")
            lines += [f"  {SIGNATURE_NAMES[key]}: {text}" for key, text in self.signatures.items()]
        return lines

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
    references_from: str | None = None,
) -> Comparison:
    """Compare `systems` with `baseline` (a system's name; default the first): the paired
    tests, drawn as `resampling` says, the length buckets (`edges`: their lower edges) and
    the length ratios. `references` default: those an eval folder among the systems brings
    (`references_from`: the file given ones come from); `task` default: the eval records',
    else translation. `train_references`: the training targets the word frequencies count
    (default: those of the first checkpoint system's data); `gold`: a Pharaoh or NAACL file
    of (source word, reference word) links of the test set, for the AER of the attention;
    `attention`: measure the checkpoint systems' attention, on `device`; `names`: what notes
    and messages call these arguments (`ARGUMENT_NAMES`)."""
    called = ARGUMENT_NAMES | dict(names or {})
    check_extras(train_references, gold, attention, called)
    names, baseline = _baseline_among(systems, baseline)
    notes: list[str] = []
    test_set = {"sentences": 0, "references": references_from, "split": _split_of(systems)}
    if references is None:
        references, test_set["references"] = _references(systems)
    if sources is None:
        sources = _sources(systems, len(references), notes, called)
    _check_lengths(systems, references, sources)
    test_set["sentences"] = len(references)
    links = _gold_links(gold, sources, references, called)  # read before the work
    task = task or next((s.task for s in systems if s.task), None) or "translation"
    if task not in TASK_TESTED_METRICS:
        raise UserError(f"unknown task {task!r}; valid: {', '.join(TASK_TESTED_METRICS)}")
    metrics = list(TASK_TESTED_METRICS[task])
    resampling.check_memory(len(references), called)
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
    by_name = {system.name: system for system in systems}
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
        notes=notes,
        test_set=test_set,
        decoding={name: by_name[name].decoding for name in order},
        signatures=metric_signatures(metrics),
        inputs=[item for system in systems for item in system.files()],
    )
    result.ratio_counts = {name: ratio_bucket_counts(outputs[name], references) for name in order}
    result.words = _word_table(systems, outputs, references, train_references, result.notes, called)
    if attention:
        members = [bucket_members(measured, bucket, unit) for bucket in buckets]
        result.attention = _attention(
            systems, order, sources, references, members, links, device, result.notes
        )
    return result


def _baseline_among(systems: Sequence[System], baseline: str | None) -> tuple[list[str], str]:
    """The systems' names and the baseline's (default: the first); UserError below two
    systems, for a name given twice or a baseline that is none of them."""
    if len(systems) < 2:
        raise UserError(f"comparing needs at least two systems, got {len(systems)}")
    names = [system.name for system in systems]
    if len(set(names)) != len(names):
        raise UserError(f"a system is given twice: {names}")
    baseline = baseline if baseline is not None else names[0]
    if baseline not in names:
        raise UserError(f"baseline {baseline!r} is not among the systems: {', '.join(names)}")
    return names, baseline


def metric_signatures(metrics: Sequence[str]) -> dict[str, str]:
    """sacreBLEU's signature of each of `metrics` that sacreBLEU computes."""
    return {
        metric: sacrebleu_signature(metric) for metric in metrics if metric in SACREBLEU_METRICS
    }


def _split_of(systems: Sequence[System]) -> str | None:
    """The split every system evaluated on a split was scored on; None when none was, or
    they differ."""
    splits = {system.split for system in systems if system.split is not None}
    return splits.pop() if len(splits) == 1 else None


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
    reasons = []
    if train_references is not None:
        targets, origin = list(train_references), "the given training targets"
    else:
        targets, origin = None, ""
        for system in systems:
            if system.checkpoint is None:
                continue
            pairs, reason = read_split(system.checkpoint, "train")
            if pairs:
                targets, origin = [target for _, target in pairs], "the training targets of "
                origin += system.name
                break
            reasons.append(reason)
    if targets is None:
        notes.append(
            "word F-measure by training frequency: left out, no training targets (give "
            f"{names['train_references']}, or compare a checkpoint whose training data this "
            "machine can read)" + "".join(f"; {reason}" for reason in reasons if reason)
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


def _sources(
    systems: Sequence[System], count: int, notes: list[str], names: Mapping[str, str]
) -> list[str] | None:
    """The source texts of the first system evaluated on a dataset split that this machine
    can read (one per reference); None when there is none, with a note saying why when a
    checkpoint's data was there to read."""
    reasons = []
    for system in systems:
        if system.checkpoint is not None and system.split is not None:
            pairs, reason = read_split(system.checkpoint, system.split)
            if pairs is not None and len(pairs) == count:
                return [source for source, _ in pairs]
            reasons.append(reason or f"{system.checkpoint}: {len(pairs or [])} sources")
    if reasons:
        why = "; ".join(reasons)
        notes.append(
            f"length buckets: by reference length, the sources were not read ({why}); give "
            f"{names['sources']}"
        )
    return None


def _references(systems: Sequence[System]) -> tuple[list[str], str]:
    """The references of the first system that brings them (an eval result), and their file."""
    for system in systems:
        if system.references is not None and system.path is not None:
            return system.references, str(system.path / "refs.txt")
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
