"""`attnseq sweep-report`: one table (and a plot) of a Hydra multirun sweep's results.

A sweep folder (`multirun/DATE/TIME/`, or whatever `hydra.sweep.dir` named) holds one folder per
job, each with `.hydra/overrides.yaml` (the job's command-line overrides, which is what differs
between jobs) and, once training has finished, `metrics.json` (written by attnseq/training/run.py).
The basic sweeper also writes `multirun.yaml` at the root; the Optuna sweeper writes
`optimization_results.yaml` there (best parameters and value) instead.

The report sorts jobs by one metric, shows as columns only the parameters whose values differ
across jobs and several metrics, groups jobs that differ only in their seed into one row (mean
± sd, attnseq/analysis/sweep_table.py), shows each job's wall time, lists jobs without
metrics.json as failed or unfinished, and writes a CSV file (one row per job) and a PNG
figure. Files are read with PyYAML: this is a reporting tool and needs no Hydra.
"""

import csv
import functools
import io
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attnseq.errors import UserError

# metric name endings where smaller is better; every other metric is maximised
_LOWER_IS_BETTER = ("loss", "ppl", "aer")
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


@dataclass
class SweepReport:
    """What `attnseq sweep-report` shows.

    jobs: every job, finished ones sorted best first by `metric`, then the unfinished ones.
    varied: override keys whose value differs across jobs (the table's parameter columns).
    metric: the metric jobs are sorted by; higher_is_better: its direction.
    optuna_best: the Optuna sweeper's optimization_results.yaml, when present.
    metric_keys: every numeric metrics.json key of the finished jobs (the CSV's columns).
    """

    root: Path
    jobs: list[Job]
    varied: list[str]
    metric: str
    higher_is_better: bool
    optuna_best: dict[str, Any] | None = None
    metric_keys: list[str] = field(default_factory=list)

    @property
    def finished(self) -> list[Job]:
        return [job for job in self.jobs if job.metrics is not None]

    @property
    def unfinished(self) -> list[Job]:
        return [job for job in self.jobs if job.metrics is None]


# ----------------------------------------------------------------------------------- reading
def _read_yaml(path: Path) -> Any:
    """YAML contents, or None when the file is missing or unreadable (a job being written)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def _read_metrics(path: Path) -> dict[str, Any] | None:
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return metrics if isinstance(metrics, dict) else None


def parse_override(override: str) -> tuple[str, str]:
    """`key=value` (also `+key=value`, `++key=value`, `~key`) -> (key, value)."""
    key, _, value = override.partition("=")
    if key.startswith("~"):
        return key[1:], "<deleted>"
    return key.lstrip("+"), value


def _job_sort_key(name: str) -> tuple:
    """Natural order: job 10 after job 9 (Hydra numbers jobs 0, 1, ...)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def job_order(job: Job) -> tuple:
    return _job_sort_key(job.name)


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
        overrides = _read_yaml(overrides_file)
        if not isinstance(overrides, list):
            overrides = []
        params = dict(parse_override(str(item)) for item in overrides)
        name = folder.relative_to(root).as_posix()
        metrics = _read_metrics(folder / "metrics.json")
        wall = job_wall_seconds(folder) if metrics is not None else None
        jobs.append(Job(name, folder, params, metrics, wall))
    return sorted(jobs, key=lambda job: _job_sort_key(job.name))


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
    """Override keys whose values differ across jobs (missing counts as a value), in the
    order they first appear."""
    order: dict[str, None] = {}
    for job in jobs:
        order.update(dict.fromkeys(job.params))
    return [key for key in order if len({job.params.get(key) for job in jobs}) > 1]


def higher_is_better(metric: str) -> bool:
    """Loss, perplexity and alignment error rate are minimised; every other metric maximised."""
    return not metric.lower().endswith(_LOWER_IS_BETTER)


def _recorded_metric(root: Path, jobs: Sequence[Job]) -> str | None:
    """The metric the sweep optimised, from the run's own config: `optimized_metric`, else
    test/<trainer.early_stopping_metric> (what attnseq/cli/train_task.py returns to a sweeper).

    The basic sweeper saves the config as multirun.yaml; the Optuna sweeper does not, but every
    job has its composed config in .hydra/config.yaml.
    """
    for path in [root / "multirun.yaml", *(job.folder / ".hydra" / "config.yaml" for job in jobs)]:
        config = _read_yaml(path)
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


def metric_keys(jobs: Sequence[Job]) -> list[str]:
    """Numeric metric names over all finished jobs, sorted."""
    keys: set[str] = set()
    for job in jobs:
        keys.update(key for key in job.metrics or {} if job.value(key) is not None)
    return sorted(keys)


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
        return (job.metrics is None, missing, score, _job_sort_key(job.name))

    optuna = _read_yaml(root / "optimization_results.yaml")
    return SweepReport(
        root=root,
        jobs=sorted(jobs, key=rank),
        varied=varied_keys(jobs),
        metric=chosen,
        higher_is_better=better,
        optuna_best=optuna if isinstance(optuna, dict) else None,
        metric_keys=metric_keys(jobs),
    )


# ----------------------------------------------------------------------------------- writing
def print_report(
    report: SweepReport, console: Any = None, metrics: Sequence[str] | None = None
) -> None:
    """The table, best row first, then unfinished jobs and the Optuna result, with rich.
    `metrics`: the metric columns (default: every test/* key; sweep_table.metric_columns)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from attnseq.analysis.sweep_table import metric_columns, report_rows, text_table

    # a pipe or a file gets room for wide tables; a terminal keeps its own width
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    arrow = "higher is better" if report.higher_is_better else "lower is better"
    # plain text: parameter values such as [0.9,0.98] are data, not rich markup
    say = functools.partial(console.print, markup=False, highlight=False, soft_wrap=True)
    say(f"sweep {report.root}: {len(report.finished)} of {len(report.jobs)} jobs finished")
    table = Table(caption=Text(f"sorted by {report.metric} ({arrow})"))
    header, cells, right = text_table(report, report_rows(report), metric_columns(report, metrics))
    for name, numeric in zip(header, right, strict=True):
        table.add_column(
            Text(name),
            justify="right" if numeric else "left",
            overflow="fold",
            style="bold" if name == report.metric else None,
        )
    for line in cells:
        failed = line[0] == ""  # no rank: no finished job in the row
        status = Text(line[-1], style="red" if failed else None)
        table.add_row(*(Text(cell) for cell in line[:-1]), status)
    console.print(table)
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


def _same_value(written: str | None, value: Any) -> bool:
    """Does an override value (a string) equal a value read back from YAML?"""
    if written is None:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = _as_number(written)
        return number is not None and math.isclose(number, float(value), rel_tol=1e-12)
    return written == str(value)


def optuna_best_job(report: SweepReport) -> Job | None:
    """The job that ran Optuna's best parameters (the first, if several did)."""
    best = (report.optuna_best or {}).get("best_params")
    if not isinstance(best, dict):
        return None
    for job in sorted(report.jobs, key=lambda job: _job_sort_key(job.name)):
        if all(_same_value(job.params.get(str(k)), v) for k, v in best.items()):
            return job
    return None


def report_rows(report: SweepReport) -> tuple[list[str], list[list[Any]]]:
    """CSV header and rows: job, status, every varied parameter, every numeric metric, wall
    time in seconds."""
    header = ["job", "status", *report.varied, *report.metric_keys, "wall_seconds"]
    rows = []
    for job in report.jobs:
        metrics = job.metrics or {}
        rows.append(
            [
                job.name,
                job.status,
                *(job.params.get(key, "") for key in report.varied),
                *(metrics.get(key, "") for key in report.metric_keys),  # as metrics.json has it
                "" if job.wall_seconds is None else round(job.wall_seconds, 1),
            ]
        )
    return header, rows


def write_csv(report: SweepReport, path: Path) -> Path:
    from attnseq.io.atomic import atomic_write_text

    header, rows = report_rows(report)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())
    return path


def _as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def short_value(text: str) -> str:
    """A parameter value for display: floats to 4 significant digits (Optuna samples
    0.0006824078427098838), everything else as written."""
    number = _as_number(text)
    if number is None or text.lstrip("+-").isdigit():
        return text
    return f"{number:.4g}"


def report_figure(report: SweepReport):
    """When every varied parameter is numeric: one scatter panel per parameter, the metric
    against its values (a log axis when they span two decades, as learning rates do). Else
    one bar per finished job, best on top, labelled with its parameters.

    Drawn on a `matplotlib.figure.Figure` without pyplot, as attnseq.analysis.figures does.
    """
    from matplotlib.figure import Figure

    jobs = [job for job in report.finished if job.value(report.metric) is not None]
    values = [float(job.value(report.metric) or 0.0) for job in jobs]
    columns = {key: [_as_number(job.params.get(key, "")) for job in jobs] for key in report.varied}
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
