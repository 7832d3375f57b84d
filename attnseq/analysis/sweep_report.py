"""`attnseq sweep-report`: a Hydra multirun sweep's jobs as rows, seeds pooled as mean ± sd, in a
rich table, markdown, LaTeX and CSV, and a figure. It reads the folder with PyYAML, no Hydra."""

import csv
import functools
import io
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len

from attnseq.analysis.seed_groups import differing_keys, natural_order, parse_override, read_yaml
from attnseq.analysis.tables import render_table
from attnseq.config.choices import higher_is_better
from attnseq.errors import UserError
from attnseq.evaluation.significance import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_TRIALS,
    TASK_TESTED_METRICS,
    Resampling,
)
from attnseq.io.atomic import atomic_write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from attnseq.analysis.seed_comparison import SeedComparison

FINISHED = "ok"
UNFINISHED = "failed/unfinished"


@dataclass
class Job:
    """One job of a sweep.

    name: the job folder relative to the sweep folder ("0", "1", ... by default).
    params: the job's overrides, key -> value as written on the command line.
    metrics: the contents of metrics.json; None when the job has none (failed or still running).
    wall_seconds: from the job's start to its metrics.json (`job_wall_seconds`); None while
        it has none.
    """

    name: str
    folder: Path
    params: dict[str, str]
    metrics: dict[str, Any] | None
    wall_seconds: float | None = None

    @property
    def status(self) -> str:
        return FINISHED if self.metrics is not None else UNFINISHED

    def value(self, metric: str) -> float | None:
        """The job's value of `metric`, None when missing or not a number."""
        if self.metrics is None:
            return None
        value = self.metrics.get(metric)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)


def _read_metrics(path: Path) -> dict[str, Any] | None:
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return metrics if isinstance(metrics, dict) else None


def job_order(job: Job) -> tuple:
    return natural_order(job.name)


def find_jobs(root: Path) -> list[Job]:
    """Every job folder under `root`: a folder (below the root) holding .hydra/overrides.yaml.

    Hydra puts jobs at `${hydra.sweep.subdir}`, by default the job number, but a user may
    choose a nested subdir (e.g. `${hydra.job.override_dirname}`), so the search is recursive.
    """
    jobs = []
    for overrides_file in root.rglob(".hydra/overrides.yaml"):
        folder = overrides_file.parent.parent
        if folder == root:
            continue
        overrides = read_yaml(overrides_file)
        if not isinstance(overrides, list):
            overrides = []
        params = dict(parse_override(str(item)) for item in overrides)
        name = folder.relative_to(root).as_posix()
        metrics = _read_metrics(folder / "metrics.json")
        wall = job_wall_seconds(folder) if metrics is not None else None
        jobs.append(Job(name, folder, params, metrics, wall))
    return sorted(jobs, key=job_order)


def sweep_files(root: Path) -> list[Path]:
    """The files a report of the sweep under `root` reads: its multirun.yaml and
    optimization_results.yaml, each job's .hydra/ files and metrics.json, and what the
    significance decodes or reuses, each job's checkpoints and eval results (those that
    exist)."""
    files = [root / "multirun.yaml", root / "optimization_results.yaml"]
    for job in find_jobs(root):
        hydra = job.folder / ".hydra"
        files += sorted(hydra.iterdir()) if hydra.is_dir() else []
        files.append(job.folder / "metrics.json")
        files += sorted((job.folder / "checkpoints").glob("*.pt"))
        files += sorted((job.folder / "eval").glob("*/*/*"))
    return [path for path in files if path.is_file()]


def job_wall_seconds(folder: Path) -> float | None:
    """Seconds from the job's start to the end of its training: Hydra writes .hydra/ when a
    job starts and training writes metrics.json last, so the modification times of the two
    bound the job (a job resumed in its own folder: its last session)."""
    try:
        started = min(path.stat().st_mtime for path in (folder / ".hydra").iterdir())
        ended = (folder / "metrics.json").stat().st_mtime
    except (OSError, ValueError):  # ValueError: an empty .hydra/
        return None
    return max(ended - started, 0.0)


def varied_keys(jobs: Sequence[Job]) -> list[str]:
    """Override keys whose values differ across jobs, in the order they first appear."""
    return differing_keys([job.params for job in jobs])


def metric_keys(jobs: Sequence[Job]) -> list[str]:
    """Numeric metric names over all finished jobs, sorted."""
    keys: set[str] = set()
    for job in jobs:
        keys.update(key for key in job.metrics or {} if job.value(key) is not None)
    return sorted(keys)


def as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def short_value(text: str) -> str:
    """A parameter value for display: floats to 4 significant digits (Optuna samples
    0.0006824078427098838), everything else as written."""
    number = as_number(text)
    if number is None or text.lstrip("+-").isdigit():
        return text
    return f"{number:.4g}"


# -------------------------------------------------------------------------------------- report
@dataclass
class SweepReport:
    """What `attnseq sweep-report` shows.

    jobs: every job, finished ones sorted best first by `metric`, then the unfinished ones.
    varied: override keys whose value differs across jobs (the table's parameter columns).
    metric: the metric jobs are sorted by; higher_is_better: its direction
        (attnseq.config.choices.higher_is_better).
    optuna_best: the Optuna sweeper's optimization_results.yaml, when present.
    metric_keys: every numeric metrics.json key of the finished jobs (the metric columns one
        may ask for).
    """

    root: Path
    jobs: list[Job]
    varied: list[str]
    metric: str
    higher_is_better: bool
    optuna_best: dict[str, Any] | None = None
    metric_keys: list[str] = field(default_factory=list)
    significance: "Significance | None" = None  # add_significance

    @property
    def finished(self) -> list[Job]:
        return [job for job in self.jobs if job.metrics is not None]

    @property
    def unfinished(self) -> list[Job]:
        return [job for job in self.jobs if job.metrics is None]


def _recorded_metric(root: Path, jobs: Sequence[Job]) -> str | None:
    """The metric the sweep optimised, from the run's own config: `optimized_metric`, else
    test/<trainer.early_stopping_metric> (what attnseq/cli/hydra_entry.py returns to a sweeper).

    The basic sweeper saves the config as multirun.yaml; the Optuna sweeper does not, but every
    job has its composed config in .hydra/config.yaml.
    """
    for path in [root / "multirun.yaml", *(job.folder / ".hydra" / "config.yaml" for job in jobs)]:
        config = read_yaml(path)
        if not isinstance(config, dict):
            continue
        if config.get("optimized_metric"):
            return str(config["optimized_metric"])
        trainer = config.get("trainer")
        if isinstance(trainer, dict) and trainer.get("early_stopping_metric"):
            return f"test/{trainer['early_stopping_metric']}"
    return None


def choose_metric(root: Path, jobs: Sequence[Job], requested: str | None) -> str:
    """The metric to sort by: the one asked for (it must exist in some metrics.json), else
    the sweep's optimised metric when jobs report it, else test/bleu, else the first test/*
    key, else the first numeric key."""
    keys = metric_keys(jobs)
    if requested is not None:
        if keys and requested not in keys:
            raise UserError(
                f"metric {requested!r} is in no metrics.json of {root}. Available: "
                f"{', '.join(keys)}"
            )
        return requested
    recorded = _recorded_metric(root, jobs)
    for candidate in (recorded, "test/bleu"):
        if candidate and candidate in keys:
            return candidate
    test_keys = [key for key in keys if key.startswith("test/")]
    if test_keys:
        return test_keys[0]
    if keys:
        return keys[0]
    return recorded or "test/bleu"  # nothing finished yet: the table lists unfinished jobs


def is_multirun_dir(root: Path) -> bool:
    return (root / "multirun.yaml").is_file() or (root / "optimization_results.yaml").is_file()


def load_report(root: Path, metric: str | None = None) -> SweepReport:
    """Read a sweep folder; UserError if it is not one."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"sweep folder not found: {root}")
    jobs = find_jobs(root)
    if not jobs:
        hint = (
            " It is a single run (it has .hydra/ itself); sweep-report reads the multirun "
            "folder above its jobs, e.g. multirun/DATE/TIME."
            if (root / ".hydra").is_dir()
            else " Expected multirun/DATE/TIME/ from `attnseq train -m ...`, with one folder "
            "per job holding .hydra/overrides.yaml."
        )
        state = "has no jobs yet" if is_multirun_dir(root) else "is not a Hydra multirun folder"
        raise UserError(f"{root} {state}.{hint}")
    chosen = choose_metric(root, jobs, metric)
    better = higher_is_better(chosen)

    def rank(job: Job) -> tuple:
        value = job.value(chosen)
        missing = value is None or math.isnan(value)
        score = 0.0 if missing else (-value if better else value)
        return (job.metrics is None, missing, score, job_order(job))

    optuna = read_yaml(root / "optimization_results.yaml")
    return SweepReport(
        root=root,
        jobs=sorted(jobs, key=rank),
        varied=varied_keys(jobs),
        metric=chosen,
        higher_is_better=better,
        optuna_best=optuna if isinstance(optuna, dict) else None,
        metric_keys=metric_keys(jobs),
    )


# ---------------------------------------------------------------------------------------- rows
SEED_KEY = "seed"
FORMATS = ("table", "csv", "markdown", "latex")


@dataclass
class Row:
    """One setting: a job, or the jobs that differ only in their seed."""

    jobs: list[Job]
    params: dict[str, str]  # the varied parameters other than the seed

    @property
    def finished(self) -> list[Job]:
        return [job for job in self.jobs if job.metrics is not None]

    @property
    def name(self) -> str:
        return ",".join(job.name for job in self.jobs)

    @property
    def seeds(self) -> str:
        return ",".join(job.params.get(SEED_KEY, "") for job in self.jobs)

    def values(self, metric: str) -> list[float]:
        found = [job.value(metric) for job in self.finished]
        return [value for value in found if value is not None and not math.isnan(value)]

    def mean(self, metric: str) -> float | None:
        values = self.values(metric)
        return statistics.fmean(values) if values else None

    def sd(self, metric: str) -> float | None:
        """Sample standard deviation; None below two values."""
        values = self.values(metric)
        return statistics.stdev(values) if len(values) > 1 else None

    def wall_seconds(self) -> float | None:
        """Mean wall time of the finished jobs."""
        times = [job.wall_seconds for job in self.finished if job.wall_seconds is not None]
        return statistics.fmean(times) if times else None


def grouped(report: SweepReport) -> bool:
    return SEED_KEY in report.varied


def report_rows(report: SweepReport) -> list[Row]:
    """The rows, best first by the mean of `report.metric`; rows with no finished job last."""
    keys = [key for key in report.varied if key != SEED_KEY]
    if not grouped(report):
        return [Row([job], {key: job.params.get(key, "") for key in keys}) for job in report.jobs]
    rows: dict[tuple, Row] = {}
    for job in sorted(report.jobs, key=job_order):  # a row lists its jobs in job order
        params = {key: job.params.get(key, "") for key in keys}
        rows.setdefault(tuple(params.values()), Row([], params)).jobs.append(job)
    direction = -1.0 if report.higher_is_better else 1.0

    def rank(row: Row) -> tuple:
        mean = row.mean(report.metric)
        return (not row.finished, mean is None, 0.0 if mean is None else direction * mean)

    return sorted(rows.values(), key=rank)  # stable: equal rows stay in job order


def metric_columns(
    report: SweepReport, requested: Sequence[str] | None = None, name: str = "metrics"
) -> list[str]:
    """The metric columns: `requested` (each must exist), else every test/* key (every key
    when there is none); the sort metric first. `name`: what the message for an unknown
    column calls `requested` (a command passes its option)."""
    available = report.metric_keys
    if requested:
        unknown = [name for name in requested if available and name not in available]
        if unknown:
            raise UserError(
                f"{name}: {', '.join(unknown)} in no metrics.json of {report.root}. "
                f"Available: {', '.join(available)}"
            )
        chosen = list(dict.fromkeys(requested))
    else:
        chosen = [key for key in available if key.startswith("test/")] or list(available)
    return [report.metric, *(key for key in chosen if key != report.metric)]


def csv_columns(report: SweepReport, columns: Sequence[str]) -> list[str]:
    """The metric columns of the CSV file: the table's `columns`, then the default table's
    (`metric_columns`) that they leave out, so that choosing the table's columns never takes
    one out of the file."""
    return [*columns, *(key for key in metric_columns(report) if key not in columns)]


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def mean_sd(row: Row, metric: str) -> str:
    mean, sd = row.mean(metric), row.sd(metric)
    if mean is None or sd is None:
        return number(mean)
    return f"{mean:.4g} ± {sd:.2g}"


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def text_table(
    report: SweepReport, rows: list[Row], metrics: list[str]
) -> tuple[list[str], list[list[str]], list[bool]]:
    """Header, cells and which columns are numbers (right-aligned), as every text form shows
    them."""
    seeds = grouped(report)
    params = [key for key in report.varied if key != SEED_KEY]
    header = ["rank", "jobs" if seeds else "job", *params]
    header += ["seeds", "n"] if seeds else []
    header += [*metrics, *significance_head(report), "wall min", "status"]
    cells = []
    for rank, row in enumerate(rows, start=1):
        status = f"{len(row.finished)}/{len(row.jobs)} ok" if seeds else row.jobs[0].status
        line = [str(rank) if row.finished else "", row.name]
        line += [short_value(row.params[key]) for key in params]
        line += [row.seeds, str(len(row.finished))] if seeds else []
        line += [mean_sd(row, metric) for metric in metrics]
        line += significance_cells(report, row)
        cells.append([*line, minutes(row.wall_seconds()), status])
    numeric = {"rank", "n", "wall min", *metrics}
    return header, cells, [name in numeric for name in header]


def render(report: SweepReport, rows: list[Row], metrics: list[str], fmt: str) -> str:
    """The report as CSV (raw numbers, mean and sd in columns of their own), Markdown or
    LaTeX (booktabs) text; the significance rule follows the table (LaTeX: as comments)."""
    if fmt == "csv":
        return csv_text(report, rows, metrics)
    if fmt not in ("markdown", "latex"):
        raise UserError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
    header, cells, right = text_table(report, rows, metrics)
    table = render_table(header, cells, fmt, numeric=right)
    if fmt == "markdown":
        return table + "\n" + "".join(f"\n{line}\n" for line in significance_lines(report))
    return "\n".join([table, *(f"% {line}" for line in significance_lines(report))]) + "\n"


def csv_text(report: SweepReport, rows: list[Row], metrics: list[str]) -> str:
    params = [key for key in report.varied if key != SEED_KEY]
    seeds = grouped(report)
    header = ["jobs" if seeds else "job", *params] + (["seeds"] if seeds else []) + ["n"]
    for metric in metrics:
        header += [metric, f"{metric}_sd"]
    if report.significance is not None:
        name = report.significance.metric
        header += [f"{name}_verdict", f"{name}_significant_pairs", f"{name}_tested_pairs"]
    header += ["wall_seconds", "finished", "jobs_total"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        line: list[object] = [row.name, *(row.params[key] for key in params)]
        line += [row.seeds] if seeds else []
        line.append(len(row.finished))
        for metric in metrics:
            line += [_raw(row.mean(metric)), _raw(row.sd(metric))]
        if report.significance is not None:
            line += report.significance.csv_cells(row)
        line += [_raw(row.wall_seconds()), len(row.finished), len(row.jobs)]
        writer.writerow(line)
    return buffer.getvalue()


def _raw(value: float | None) -> object:
    return "" if value is None else value


# -------------------------------------------------------------------------------- significance
@dataclass
class Significance:
    """The seed comparison of a sweep's rows (`add_significance`): the comparison, the metric
    whose verdict the table shows, and each row's group name by `Row.name`."""

    comparison: "SeedComparison"
    metric: str
    groups: dict[str, str]

    def cells(self, row: Row) -> list[str]:
        """The row's verdict against the baseline and k̂/k ("baseline" for the baseline)."""
        group = self.groups.get(row.name)
        if group is None:
            return ["-", "-"]
        if group == self.comparison.baseline:
            return ["baseline", "-"]
        verdict = self.comparison.verdicts[group][self.metric]
        return [verdict.call, f"{verdict.significant}/{verdict.tested}" if verdict.tested else "-"]

    def csv_cells(self, row: Row) -> list[object]:
        """The verdict, k̂ and k as CSV values (empty where there are none)."""
        group = self.groups.get(row.name)
        if group is None or group == self.comparison.baseline:
            return ["" if group is None else "baseline", "", ""]
        verdict = self.comparison.verdicts[group][self.metric]
        return [verdict.call, verdict.significant, verdict.tested]


def significance_head(report: SweepReport) -> list[str]:
    found = report.significance
    return [] if found is None else [f"{found.metric} vs baseline", "k̂/k"]


def significance_cells(report: SweepReport, row: Row) -> list[str]:
    return [] if report.significance is None else report.significance.cells(row)


def significance_lines(report: SweepReport) -> list[str]:
    """What the significance columns are and the rule behind the verdicts; none without
    them."""
    found = report.significance
    if found is None:
        return []
    where = f"significance of {found.metric} on the test split against {found.comparison.baseline}:"
    return [where, *found.comparison.rule_lines()]


def row_label(row: Row) -> str:
    """A row's name as a group: its varied parameters, `key=value,...`, or its jobs."""
    return ",".join(f"{key}={value}" for key, value in row.params.items() if value) or row.name


def add_significance(
    report: SweepReport,
    baseline: str | None = None,
    device: str = "auto",
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    trials: int = DEFAULT_TRIALS,
    names: Mapping[str, str] | None = None,
) -> None:
    """Compare the finished runs of every row with the baseline row's over their seeds on the
    test split, each decoded or its eval result reused, as `attnseq compare` compares a sweep
    folder's groups (seed_comparison.compare_groups), and keep it in `report.significance`.
    `baseline`: a row's name (`row_label`) or a run's path; default the first row in job
    order. `names`: what messages call `baseline` and the resampling's counts (a command
    passes its options)."""
    from attnseq.analysis.comparison import Decode
    from attnseq.analysis.seed_comparison import compare_groups
    from attnseq.analysis.seed_groups import Group, ready_groups, single_member

    called = {"baseline": "baseline", **(names or {})}
    resampling = Resampling.checked(seed, resamples, trials, called)
    finished = (row for row in report_rows(report) if row.finished)
    rows = sorted(finished, key=lambda row: job_order(row.finished[0]))
    labels = {row.name: row_label(row) for row in rows}
    if len(set(labels.values())) != len(labels):
        labels = {row.name: row.name for row in rows}
    groups = [
        Group(labels[row.name], [single_member(job.folder) for job in row.finished]) for row in rows
    ]
    chosen = ready_groups(groups, baseline, called["baseline"], Decode("test", device))
    runs = (run for group in groups for run in group.runs)
    task = next((run.system.task for run in runs if run.system.task), None) or "translation"
    valid = TASK_TESTED_METRICS.get(task, TASK_TESTED_METRICS["translation"])
    short = report.metric.removeprefix("test/")
    metric = short if short in valid else valid[0]
    comparison = compare_groups(
        groups, chosen, task=task, resampling=resampling, metrics=[metric], names=called
    )
    report.significance = Significance(comparison, metric, labels)


# ------------------------------------------------------------------------------------- writing
def print_report(
    report: SweepReport, console: Any = None, metrics: Sequence[str] | None = None
) -> None:
    """The table, best row first, then unfinished jobs and the Optuna result, with rich.
    `metrics`: the metric columns (default: every test/* key; `metric_columns`). No cell
    wraps: the table takes the width it needs on a pipe or a file, and on a terminal (or
    within $COLUMNS) comes in parts that each repeat the rows' names (`table_parts`)."""
    from rich.console import Console

    width = _width()
    header, cells, right = text_table(report, report_rows(report), metric_columns(report, metrics))
    widths = column_widths(header, cells, width)
    parts = table_parts(widths, header, width)
    widest = max(table_width([widths[i] for i in part]) for part in parts)
    console = console or Console(width=max(width or widest, widest))
    # plain text: parameter values such as [0.9,0.98] are data, not rich markup
    say = functools.partial(console.print, markup=False, highlight=False, soft_wrap=True)
    say(f"sweep {report.root}: {len(report.finished)} of {len(report.jobs)} jobs finished")
    arrow = "higher is better" if report.higher_is_better else "lower is better"
    for part in parts:
        console.print(_rich_table(header, cells, right, widths, part, report.metric))
    # a line of its own: a caption would wrap inside the width of the last part
    say(f"  sorted by {report.metric} ({arrow})")
    for line in significance_lines(report):
        say(line)
    if report.unfinished:
        names = ", ".join(job.name for job in report.unfinished)
        say(f"no metrics.json (failed or still running): {names}")
    best = report.optuna_best
    if best is not None:
        if isinstance(best.get("best_params"), dict):
            params = ", ".join(f"{key}={value}" for key, value in best["best_params"].items())
            job = optuna_best_job(report)
            where = f" (job {job.name})" if job is not None else ""
            say(f"optuna best trial{where}: {params}  value={best.get('best_value')}")
        for solution in best.get("solutions") or []:  # multi-objective: the Pareto front
            params = ", ".join(f"{key}={value}" for key, value in solution["params"].items())
            say(f"optuna pareto solution: {params}  values={solution.get('values')}")


def _width() -> int | None:
    """The width the table must keep: $COLUMNS when set, else a terminal's; None on a pipe
    or a file, which take any width."""
    import shutil

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


# The columns every part of a table split for the width repeats: the rows' names
KEY_COLUMNS = {"rank", "job", "jobs", "seeds", "n"}


def header_lines(name: str, room: int) -> list[str]:
    """A column's name in lines of at most `room` characters, broken after a "/" or "."
    (test/attention/entropy: test/ attention/ entropy), never inside a word."""
    pieces = [piece for piece in re.split(r"(?<=[/.])", name) if piece]
    lines = [""]
    for piece in pieces:
        if lines[-1] and cell_len(lines[-1] + piece) > room:
            lines.append("")
        lines[-1] += piece
    return lines


def column_widths(
    header: Sequence[str], cells: Sequence[Sequence[str]], width: int | None
) -> list[int]:
    """Each column's width: its widest cell or its whole name; where that is wider than
    `width` allows, the names that save most are broken (`header_lines`) until the table
    fits, and when it still does not, every name is (the table then comes in parts)."""
    widest = [max((cell_len(row[i]) for row in cells), default=0) for i in range(len(header))]
    whole = [max(w, cell_len(name)) for w, name in zip(widest, header, strict=True)]
    broken = [
        max(w, *(cell_len(line) for line in header_lines(name, 1)))
        for w, name in zip(widest, header, strict=True)
    ]
    widths = list(whole)
    savings = sorted(range(len(header)), key=lambda i: whole[i] - broken[i], reverse=True)
    for index in savings:
        if width is None or table_width(widths) <= width:
            break
        widths[index] = broken[index]
    return widths


def table_width(widths: Sequence[int]) -> int:
    """The width of a rich table of columns `widths` wide: each column, its padding of one on
    either side, and the rules between and around them."""
    return sum(width + 3 for width in widths) + 1


def table_parts(widths: Sequence[int], header: Sequence[str], width: int | None) -> list[list[int]]:
    """The column indices of each part of the table: all in one when `width` is None or they
    fit; else each part the key columns (`KEY_COLUMNS` and the parameters: the columns before
    the first metric) and as many of the others as fit, in order."""
    every = list(range(len(header)))
    if width is None or table_width(widths) <= width:
        return [every]
    keys = [i for i in every if header[i] in KEY_COLUMNS or i < _first_value(header)]
    parts: list[list[int]] = []
    for index in (i for i in every if i not in keys):
        if parts and table_width([widths[i] for i in [*parts[-1], index]]) <= width:
            parts[-1].append(index)
        else:
            parts.append([*keys, index])
    return [sorted(part) for part in parts]


def _first_value(header: Sequence[str]) -> int:
    """The index of the first column after the rows' names and parameters."""
    after = [i for i, name in enumerate(header) if name in ("seeds", "n")]
    return (max(after) + 1) if after else 2


def _rich_table(
    header: Sequence[str],
    cells: Sequence[Sequence[str]],
    right: Sequence[bool],
    widths: Sequence[int],
    part: Sequence[int],
    metric: str,
) -> Any:
    """A rich table of the columns `part`, each `widths` wide (its name broken over lines to
    fit), no cell wrapped."""
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for index in part:
        room = widths[index]
        table.add_column(
            Text("\n".join(header_lines(header[index], room))),
            justify="right" if right[index] else "left",
            no_wrap=True,
            min_width=room,
            style="bold" if header[index] == metric else None,
        )
    for line in cells:
        failed = line[0] == ""  # no rank: no finished job in the row
        row = [Text(line[index]) for index in part]
        if part[-1] == len(line) - 1:  # the status
            row[-1] = Text(line[-1], style="red" if failed else None)
        table.add_row(*row)
    return table


def _same_value(written: str | None, value: Any) -> bool:
    """Does an override value (a string) equal a value read back from YAML?"""
    if written is None:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = as_number(written)
        return number is not None and math.isclose(number, float(value), rel_tol=1e-12)
    return written == str(value)


def optuna_best_job(report: SweepReport) -> Job | None:
    """The job that ran Optuna's best parameters (the first, if several did)."""
    best = (report.optuna_best or {}).get("best_params")
    if not isinstance(best, dict):
        return None
    for job in sorted(report.jobs, key=job_order):
        if all(_same_value(job.params.get(str(k)), v) for k, v in best.items()):
            return job
    return None


def write_csv(report: SweepReport, path: Path, metrics: Sequence[str] | None = None) -> Path:
    """The report's rows as CSV (`csv_text`, what `--format csv` prints) in `path`.
    `metrics`: the metric columns (default: `metric_columns`)."""
    atomic_write_text(path, csv_text(report, report_rows(report), metric_columns(report, metrics)))
    return path


def report_figure(report: SweepReport) -> "Figure":
    """When every varied parameter is numeric: one scatter panel per parameter, the metric
    against its values (a log axis when they span two decades, as learning rates do). Else
    one bar per finished job, best on top, labelled with its parameters.
    """
    from matplotlib.figure import Figure

    jobs = [job for job in report.finished if job.value(report.metric) is not None]
    values = [float(job.value(report.metric) or 0.0) for job in jobs]
    columns = {key: [as_number(job.params.get(key, "")) for job in jobs] for key in report.varied}
    numeric = bool(jobs) and all(x is not None for xs in columns.values() for x in xs)
    if numeric and 0 < len(columns) <= 6:
        figure = Figure(figsize=(3.2 * len(columns) + 0.8, 3.4), layout="constrained")
        axes = figure.subplots(1, len(columns), sharey=True, squeeze=False)[0]
        for ax, (key, xs) in zip(axes, columns.items(), strict=True):
            ax.scatter(xs, values, color="tab:blue")
            for x, y, job in zip(xs, values, jobs, strict=True):
                ax.annotate(job.name, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
            if min(xs) > 0 and max(xs) / min(xs) >= 100:
                ax.set_xscale("log")
            ax.set_xlabel(key)
        axes[0].set_ylabel(report.metric)
    else:
        labels = [
            f"job {job.name}: "
            + ", ".join(f"{key}={short_value(job.params.get(key, ''))}" for key in report.varied)
            for job in jobs
        ]
        longest = max((len(label) for label in labels), default=0)
        figure = Figure(
            figsize=(min(5.0 + 0.07 * longest, 20.0), min(1.5 + 0.35 * len(jobs), 40.0)),
            layout="constrained",
        )
        ax = figure.add_subplot()
        positions = list(range(len(jobs)))[::-1]  # best job on top
        ax.barh(positions, values, color="tab:blue")
        ax.set_yticks(positions, labels, fontsize=8)
        for position, value in zip(positions, values, strict=True):
            ax.annotate(
                f"{value:.4g}",
                (value, position),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.set_xlabel(report.metric)
        if not jobs:
            ax.text(0.5, 0.5, "no finished job", ha="center", va="center", transform=ax.transAxes)
    arrow = "higher is better" if report.higher_is_better else "lower is better"
    where = "/".join(report.root.resolve().parts[-2:])  # multirun/DATE/TIME -> DATE/TIME
    figure.suptitle(f"{where}: {report.metric} ({arrow})", fontsize=10)
    return figure


def write_plot(report: SweepReport, path: Path) -> Path:
    from attnseq.analysis.figures import save_figure

    return save_figure(report_figure(report), path)
