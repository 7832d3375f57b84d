"""The rows and columns of `attnseq sweep-report`, and their text forms (table, CSV, Markdown,
LaTeX).

Seeds. Jobs whose overrides differ only in `seed` are repeats of one setting: they share a row,
which shows n (the finished jobs), the seeds, and every metric as mean ± sample standard
deviation over them (a single job shows its value). A sweep without a seed axis has one row
per job. Rows are ranked by the mean of the report's metric.

Wall time. A job's wall time runs from the start of the job, when Hydra writes .hydra/, to the
end of training, when metrics.json is written last (attnseq/analysis/sweep_jobs.py reads the two
modification times). For a job resumed in its own folder (resume=auto) it is the time of the
last session.
"""

import csv
import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnseq.analysis.sweep_jobs import Job, job_order, short_value
from attnseq.errors import UserError

if TYPE_CHECKING:
    from attnseq.analysis.sweep_report import SweepReport

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


def grouped(report: "SweepReport") -> bool:
    return SEED_KEY in report.varied


def report_rows(report: "SweepReport") -> list[Row]:
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


def metric_columns(report: "SweepReport", requested: Sequence[str] | None = None) -> list[str]:
    """The metric columns: `requested` (each must exist), else every test/* key (every key
    when there is none); the sort metric first."""
    available = report.metric_keys
    if requested:
        unknown = [name for name in requested if available and name not in available]
        if unknown:
            raise UserError(
                f"--metrics: {', '.join(unknown)} in no metrics.json of {report.root}. "
                f"Available: {', '.join(available)}"
            )
        chosen = list(dict.fromkeys(requested))
    else:
        chosen = [key for key in available if key.startswith("test/")] or list(available)
    return [report.metric, *(key for key in chosen if key != report.metric)]


# ---------------------------------------------------------------------------- text cells
def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def mean_sd(row: Row, metric: str, plus_minus: str = "±") -> str:
    mean, sd = row.mean(metric), row.sd(metric)
    if mean is None or sd is None:
        return number(mean)
    return f"{mean:.4g} {plus_minus} {sd:.2g}"


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def text_table(
    report: "SweepReport", rows: list[Row], metrics: list[str], plus_minus: str = "±"
) -> tuple[list[str], list[list[str]], list[bool]]:
    """Header, cells and which columns are numbers (right-aligned), as every text form shows
    them."""
    seeds = grouped(report)
    params = [key for key in report.varied if key != SEED_KEY]
    header = ["rank", "jobs" if seeds else "job", *params]
    header += ["seeds", "n"] if seeds else []
    header += [*metrics, "wall min", "status"]
    cells = []
    for rank, row in enumerate(rows, start=1):
        status = f"{len(row.finished)}/{len(row.jobs)} ok" if seeds else row.jobs[0].status
        line = [str(rank) if row.finished else "", row.name]
        line += [short_value(row.params[key]) for key in params]
        line += [row.seeds, str(len(row.finished))] if seeds else []
        line += [mean_sd(row, metric, plus_minus) for metric in metrics]
        cells.append([*line, minutes(row.wall_seconds()), status])
    numeric = {"rank", "n", "wall min", *metrics}
    return header, cells, [name in numeric for name in header]


def render(report: "SweepReport", rows: list[Row], metrics: list[str], fmt: str) -> str:
    """The report as CSV (raw numbers, mean and sd in columns of their own), Markdown or
    LaTeX (booktabs) text."""
    if fmt == "csv":
        return csv_text(report, rows, metrics)
    if fmt == "markdown":
        header, cells, right = text_table(report, rows, metrics)
        lines = [header, ["---:" if numeric else "---" for numeric in right], *cells]
        return "".join(
            "| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |\n" for line in lines
        )
    if fmt == "latex":
        header, cells, right = text_table(report, rows, metrics, plus_minus="$\\pm$")
        spec = "".join("r" if numeric else "l" for numeric in right)
        body = [" & ".join(latex_escape(cell) for cell in line) + r" \\" for line in cells]
        title = " & ".join(latex_escape(cell) for cell in header) + r" \\"
        lines = [f"\\begin{{tabular}}{{{spec}}}", r"\toprule", title, r"\midrule", *body]
        return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"
    raise UserError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")


def csv_text(report: "SweepReport", rows: list[Row], metrics: list[str]) -> str:
    params = [key for key in report.varied if key != SEED_KEY]
    seeds = grouped(report)
    header = ["jobs" if seeds else "job", *params] + (["seeds"] if seeds else []) + ["n"]
    for metric in metrics:
        header += [metric, f"{metric}_sd"]
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
        line += [_raw(row.wall_seconds()), len(row.finished), len(row.jobs)]
        writer.writerow(line)
    return buffer.getvalue()


def _raw(value: float | None) -> object:
    return "" if value is None else value


_LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}


def latex_escape(text: str) -> str:
    """Text for a LaTeX table cell; `$\\pm$` (made by `mean_sd`) is kept as math."""
    parts = text.split("$\\pm$")
    escaped = ["".join(_LATEX_SPECIAL.get(c, c) for c in part) for part in parts]
    return "$\\pm$".join(escaped)
