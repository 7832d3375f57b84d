"""`attnseq sweep-report`: one table (and a plot) of a Hydra multirun sweep's results.

The jobs are found and read by sweep_jobs.py, the figure is drawn by sweep_figure.py; this
module chooses the metric, ranks the jobs and prints and writes the report. The basic sweeper
writes `multirun.yaml` at the root; the Optuna sweeper writes
`optimization_results.yaml` there (best parameters and value) instead.

The report sorts jobs by one metric, shows as columns only the parameters whose values differ
across jobs and several metrics, groups jobs that differ only in their seed into one row (mean
± sd, attnseq/analysis/sweep_table.py), shows each job's wall time, lists jobs without
metrics.json as failed or unfinished, and writes a CSV file (one row per job) and a PNG
figure.
"""

import csv
import functools
import io
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnseq.analysis.sweep_jobs import (
    Job,
    as_number,
    find_jobs,
    job_order,
    metric_keys,
    read_yaml,
    varied_keys,
)
from attnseq.errors import UserError

# metric name endings where smaller is better; every other metric is maximised
_LOWER_IS_BETTER = ("loss", "ppl", "aer")


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


def higher_is_better(metric: str) -> bool:
    """Loss, perplexity and alignment error rate are minimised; every other metric maximised."""
    return not metric.lower().endswith(_LOWER_IS_BETTER)


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


def write_plot(report: SweepReport, path: Path) -> Path:
    from attnseq.analysis.figures import save_figure
    from attnseq.analysis.sweep_figure import report_figure

    return save_figure(report_figure(report), path)
