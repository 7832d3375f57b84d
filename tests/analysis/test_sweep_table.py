"""`attnseq sweep-report` on a hand-made multirun with seeds: jobs that differ only in `seed`
share a row (mean ± sd, n), several metric columns, wall time from the job's files, and the
table, CSV, Markdown and LaTeX forms."""

import csv
import io
import json
import os
import statistics
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from attnseq.analysis.sweep_report import (
    latex_escape,
    load_report,
    metric_columns,
    render,
    report_rows,
)
from attnseq.cli.app import app

runner = CliRunner()
# model -> seed -> (test/bleu, test/chrf); transformer seed 3 never finished
RESULTS = {
    "rnn": {1: (20.0, 40.0), 2: (22.0, 41.0), 3: (24.0, 45.0)},
    "transformer": {1: (30.0, 50.0), 2: (34.0, 52.0), 3: None},
}


def make_job(root: Path, name: str, overrides: list[str], metrics: dict | None, minutes: int):
    hydra_dir = root / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    for file in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (hydra_dir / file).write_text(yaml.safe_dump(overrides))
        os.utime(hydra_dir / file, (1_000_000, 1_000_000))
    if metrics is not None:
        (root / name / "metrics.json").write_text(json.dumps(metrics))
        os.utime(root / name / "metrics.json", (0, 1_000_000 + 60 * minutes))


@pytest.fixture
def seeded_sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "test/bleu"}))
    number = 0
    for model, seeds in RESULTS.items():
        for seed, values in seeds.items():
            metrics = None
            if values is not None:
                metrics = {"test/bleu": values[0], "test/chrf": values[1], "best_step": 100}
            overrides = [f"model={model}", f"seed={seed}", "data=reverse"]
            make_job(root, str(number), overrides, metrics, minutes=2 + number)
            number += 1
    return root


def test_seeds_share_a_row_with_mean_and_sd(seeded_sweep: Path) -> None:
    report = load_report(seeded_sweep)
    rows = report_rows(report)
    assert [row.params for row in rows] == [{"model": "transformer"}, {"model": "rnn"}]
    best, second = rows
    assert best.name == "3,4,5" and best.seeds == "1,2,3" and len(best.finished) == 2
    assert best.mean("test/bleu") == 32.0
    assert best.sd("test/bleu") == pytest.approx(statistics.stdev([30.0, 34.0]))
    assert second.mean("test/chrf") == pytest.approx(42.0)
    assert second.sd("test/chrf") == pytest.approx(statistics.stdev([40.0, 41.0, 45.0]))
    # wall time: from .hydra/ to metrics.json; jobs 3 and 4 took 5 and 6 minutes
    assert best.wall_seconds() == pytest.approx(5.5 * 60)
    assert {job.name: job.wall_seconds for job in report.jobs}["3"] == pytest.approx(5 * 60)
    assert {job.name: job.wall_seconds for job in report.jobs}["5"] is None  # unfinished


def test_metric_columns(seeded_sweep: Path) -> None:
    report = load_report(seeded_sweep)
    assert metric_columns(report) == ["test/bleu", "test/chrf"]  # every test/* key
    assert metric_columns(report, ["best_step"]) == ["test/bleu", "best_step"]
    sorted_by_chrf = load_report(seeded_sweep, "test/chrf")
    assert metric_columns(sorted_by_chrf) == ["test/chrf", "test/bleu"]


def test_table_format(seeded_sweep: Path) -> None:
    result = runner.invoke(app, ["sweep-report", str(seeded_sweep)])
    assert result.exit_code == 0, result.output
    table = result.stdout.split("jobs finished")[1]
    for text in ("seeds", "wall min", "32 ± 2.8", "22 ± 2", "42 ± 2.6", "2/3 ok", "5.5"):
        assert text in table, text
    assert table.index("32 ± 2.8") < table.index("22 ± 2")
    assert f"wrote {seeded_sweep / 'report.csv'}" in result.stdout
    rows = list(csv.DictReader((seeded_sweep / "report.csv").open()))
    assert [row["jobs"] for row in rows] == ["3,4,5", "0,1,2"]  # a row per setting
    assert rows[0]["n"] == "2" and float(rows[0]["wall_seconds"]) == pytest.approx(5.5 * 60)


def test_the_csv_file_is_the_csv_format(seeded_sweep: Path) -> None:
    for metrics in ([], ["--metrics", "test/chrf,best_step"]):
        args = ["sweep-report", str(seeded_sweep), "--format", "csv", *metrics]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert (seeded_sweep / "report.csv").read_text() == result.stdout


def test_csv_format(seeded_sweep: Path) -> None:
    result = runner.invoke(
        app, ["sweep-report", str(seeded_sweep), "--format", "csv", "--metrics", "test/chrf"]
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == [
        "jobs", "model", "seeds", "n", "test/bleu", "test/bleu_sd", "test/chrf",
        "test/chrf_sd", "wall_seconds", "finished", "jobs_total",
    ]  # fmt: skip
    assert rows[0]["model"] == "transformer" and rows[0]["n"] == "2"
    assert float(rows[0]["test/bleu"]) == 32.0 and rows[0]["jobs_total"] == "3"
    assert float(rows[1]["test/chrf_sd"]) == pytest.approx(statistics.stdev([40.0, 41.0, 45.0]))
    assert "wrote" not in result.stdout  # stdout is the CSV alone


def test_markdown_and_latex_formats(seeded_sweep: Path) -> None:
    markdown = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--format", "markdown"])
    assert markdown.exit_code == 0, markdown.output
    lines = markdown.stdout.splitlines()
    assert lines[0].startswith("| rank | jobs | model | seeds | n | test/bleu | test/chrf |")
    assert lines[1].startswith("| ---: | --- | --- | --- | ---: | ---: |")
    assert lines[2].startswith("| 1 | 3,4,5 | transformer | 1,2,3 | 2 | 32 ± 2.8 |")
    assert len(lines) == 4
    latex = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--format", "latex"])
    assert latex.exit_code == 0, latex.output
    text = latex.stdout
    assert text.startswith("\\begin{tabular}{rlllrrrrl}\n\\toprule\n")
    assert "rank & jobs & model & seeds & n & test/bleu & test/chrf & wall min & status" in text
    assert "32 $\\pm$ 2.8" in text and text.rstrip().endswith("\\end{tabular}")


def test_a_sweep_without_seeds_has_a_row_per_job(seeded_sweep: Path, tmp_path: Path) -> None:
    root = tmp_path / "lr"
    root.mkdir()
    (root / "multirun.yaml").write_text("{}")
    for number, lr in enumerate(["0.1", "0.01"]):
        make_job(root, str(number), [f"optim.lr={lr}"], {"test/loss": 1.0 + number}, minutes=1)
    report = load_report(root)
    assert [row.name for row in report_rows(report)] == ["0", "1"]  # loss: lower is better
    text = render(report, report_rows(report), metric_columns(report), "markdown")
    assert text.splitlines()[0] == "| rank | job | optim.lr | test/loss | wall min | status |"
    assert text.splitlines()[2] == "| 1 | 0 | 0.1 | 1 | 1.0 | ok |"


def test_bad_format_and_metrics_exit_2(seeded_sweep: Path) -> None:
    result = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--format", "html"])
    assert result.exit_code == 2 and "--format must be one of table, csv" in result.stderr
    result = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--metrics", "test/nope"])
    assert result.exit_code == 2 and "test/nope" in result.stderr
    assert "Available: best_step, test/bleu, test/chrf" in result.stderr


def test_latex_escaping() -> None:
    assert latex_escape("optim.warmup_steps") == "optim.warmup\\_steps"
    assert latex_escape("50% & more") == "50\\% \\& more"
    assert latex_escape("1 $\\pm$ 2") == "1 $\\pm$ 2"
