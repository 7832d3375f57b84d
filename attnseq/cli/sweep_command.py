"""`attnseq sweep-report`: the table of a Hydra multirun sweep, best first, on stdout, and its
CSV file and plot beside it."""

from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.options import ThreadsOption, apply_threads
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError


def sweep_report(
    multirun_dir: Annotated[
        Path, typer.Argument(help="A sweep folder from `attnseq train -m`: multirun/DATE/TIME.")
    ],
    metric: Annotated[
        str | None,
        typer.Option(
            help="metrics.json key to sort by (default: the sweep's optimized_metric, or "
            "test/<trainer.early_stopping_metric> that the sweeper received; else test/bleu, "
            "else the first test/* key). Lower is better for keys ending in loss, ppl or aer."
        ),
    ] = None,
    csv_file: Annotated[
        Path | None, typer.Option("--csv", help="CSV file (default: MULTIRUN_DIR/report.csv).")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Figure, .png/.svg/.pdf (default: MULTIRUN_DIR/report.png)."),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Metric columns of the table, comma-separated (default: every test/* key); "
            "the --metric sorted by comes first. The CSV file keeps every test/* column beside "
            "them."
        ),
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (rich, for a terminal), csv, markdown or latex (booktabs), on stdout.",
        ),
    ] = "table",
    significance: Annotated[
        bool,
        typer.Option(
            "--significance",
            help="Decode each finished run's test split (or reuse its eval result) and add, "
            "per configuration, the verdict of Almost Stochastic Order over its seeds and the "
            "count of significant seed pairs against the baseline (as `attnseq compare` does).",
        ),
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="With --significance: the baseline configuration, by its varied parameters "
            "(e.g. model.attention.score=general) or a run's path (default: the first)."
        ),
    ] = None,
    device: Annotated[
        str, typer.Option(help="With --significance: device for decoding the runs.")
    ] = "auto",
    resamples: Annotated[
        int,
        typer.Option(
            help="With --significance: bootstrap resamples (also ASO's iterations), 1 to 1000000."
        ),
    ] = 1000,
    trials: Annotated[
        int,
        typer.Option(help="With --significance: approximate randomization trials, 1 to 1000000."),
    ] = 10000,
    threads: ThreadsOption = None,
) -> None:
    """Table of a sweep, best first: the parameters that differ between jobs, several metrics
    and each job's wall time; jobs that differ only in their seed share a row with mean ± sd
    and n. Jobs without metrics.json are listed as failed or unfinished. Also writes the
    rows as a CSV file (what --format csv prints, with every test/* column kept) and a plot,
    and prints the Optuna sweeper's best trial when there is one.

    \b
    attnseq sweep-report multirun/2026-11-22/10-00-00
    attnseq sweep-report SWEEP --metric test/loss --csv sweep.csv
    attnseq sweep-report SWEEP --metrics test/bleu,test/chrf --format markdown
    attnseq sweep-report SWEEP --format latex > table.tex
    attnseq sweep-report SWEEP --significance --baseline model=rnn_luong
    """
    from attnseq.analysis.sweep_report import (
        FORMATS,
        add_significance,
        csv_columns,
        load_report,
        metric_columns,
        print_report,
        render,
        report_rows,
        sweep_files,
        write_csv,
        write_plot,
    )
    from attnseq.io.user_paths import (
        check_output_file,
        image_suffixes,
        refuse_output_over_inputs,
    )

    csv_path = csv_file or multirun_dir / "report.csv"
    plot_path = plot or multirun_dir / "report.png"
    with user_errors():
        if output_format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {output_format!r}")
        inputs = [("sweep file", path) for path in sweep_files(multirun_dir)]
        for option, path in (("--csv", csv_path), ("--plot", plot_path)):
            refuse_output_over_inputs(path, option, inputs)
        check_output_file(csv_path, "--csv")
        check_output_file(plot_path, "--plot", image_suffixes())
        report = load_report(multirun_dir, metric)
        wanted = [name.strip() for name in metrics.split(",") if name.strip()] if metrics else None
        columns = metric_columns(report, wanted, "--metrics")
        if baseline is not None and not significance:
            raise UserError("--baseline chooses the baseline of --significance: give both")
        if significance:
            apply_threads(threads)  # the runs decode
            add_significance(
                report,
                baseline=baseline,
                device=device,
                resamples=resamples,
                trials=trials,
                names={"baseline": "--baseline", "resamples": "--resamples", "trials": "--trials"},
            )
    if output_format == "table":
        print_report(report, metrics=columns)
    else:
        typer.echo(render(report, report_rows(report), columns, output_format), nl=False)
    kept = csv_columns(report, columns)  # the file loses no column of the default table
    with user_errors():
        csv_path = write_csv(report, csv_path, kept)
        plot_path = write_plot(report, plot_path)
    every = " (every test/* metric column beside those of --metrics)" if kept != columns else ""
    # a table for a file or another program keeps stdout to itself
    typer.echo(f"wrote {csv_path}{every} and {plot_path}", err=output_format != "table")
