"""The figure of `attnseq sweep-report`: the sorting metric against the varied parameters.

Drawn on a `matplotlib.figure.Figure` without pyplot, as attnseq.analysis.figures does, so that
reports can be written from any thread and without a display.
"""

from typing import TYPE_CHECKING

from attnseq.analysis.sweep_jobs import as_number, short_value

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from attnseq.analysis.sweep_report import SweepReport


def report_figure(report: "SweepReport") -> "Figure":
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
