"""attnseq/analysis/sweep_report.py on hand-made multiruns: the ranking and its direction, the
rows that pool seeds (mean ± sd, n, wall time), the metric columns, and the Markdown and LaTeX
forms. (`attnseq sweep-report`: tests/cli/test_sweep_command.py.)"""

import statistics
from pathlib import Path

import pytest
import sweep_folders

from attnseq.analysis.sweep_report import (
    load_report,
    metric_columns,
    render,
    report_rows,
    short_value,
)
from attnseq.config.choices import higher_is_better


def test_metric_direction_and_ranking(fake_sweep: Path) -> None:
    assert not higher_is_better("test/loss") and not higher_is_better("valid/aer")
    assert not higher_is_better("test/ppl") and higher_is_better("test/rouge_l")
    report = load_report(fake_sweep, "test/loss")
    assert [job.name for job in report.jobs] == ["2", "1", "0", "3"]
    assert report.varied == ["model", "optim.lr"]
    assert short_value("0.0006824078427098838") == "0.0006824" and short_value("128") == "128"


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


def test_a_sweep_without_seeds_has_a_row_per_job(seeded_sweep: Path, tmp_path: Path) -> None:
    root = tmp_path / "lr"
    root.mkdir()
    (root / "multirun.yaml").write_text("{}")
    for number, lr in enumerate(["0.1", "0.01"]):
        sweep_folders.make_timed_job(
            root, str(number), [f"optim.lr={lr}"], {"test/loss": 1.0 + number}, minutes=1
        )
    report = load_report(root)
    assert [row.name for row in report_rows(report)] == ["0", "1"]  # loss: lower is better
    text = render(report, report_rows(report), metric_columns(report), "markdown")
    assert text.splitlines()[0] == "| rank | job | optim.lr | test/loss | wall min | status |"
    assert text.splitlines()[2] == "| 1 | 0 | 0.1 | 1 | 1.0 | ok |"


def test_latex_escapes_the_parameters(seeded_sweep: Path) -> None:
    report = load_report(seeded_sweep)
    for job in report.jobs:
        job.params["optim.warmup_steps"] = "50%&<4"
    report.varied.append("optim.warmup_steps")
    text = render(report, report_rows(report), metric_columns(report), "latex")
    assert r"optim.warmup\_steps" in text.splitlines()[2]
    assert r" & 50\%\&$<$4 & " in text.splitlines()[4]
