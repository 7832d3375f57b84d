"""`attnseq sweep-report` (attnseq/cli/sweep_command.py) on a real multirun (trained in this
process through helpers.attnseq_in_process, reported once through the console entry point) and
on hand-made ones (tests/sweep_folders.py): the table, CSV, Markdown and LaTeX output, the
ranking, the optuna summary, the table's width, --significance's threads, and the mistakes
that exit 2."""

import csv
import io
import os
import re
import statistics
from pathlib import Path

import helpers
import pytest
import sweep_folders
import yaml
from helpers import attnseq, attnseq_in_process
from typer.testing import CliRunner

from attnseq.cli.app import app

TINY = [*helpers.TINY, "trainer.max_steps=4", "trainer.validate_every=2"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------- a real basic multirun
@pytest.fixture(scope="module")
def basic_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny jobs of the basic launcher that differ in optim.lr."""
    root = tmp_path_factory.mktemp("basic")
    sweep_dir = root / "sweep"
    result = attnseq_in_process(
        "train", "-m", "optim.lr=0.001,0.05", *TINY, f"hydra.sweep.dir={sweep_dir}", cwd=root
    )
    assert result.returncode == 0, result.stderr
    return sweep_dir


@pytest.mark.slow
def test_report_of_a_basic_multirun(basic_sweep: Path) -> None:
    # on a pipe the table takes its own width: no COLUMNS (readline, which pytest may load,
    # exports one of the terminal it found, and a narrow one breaks the names over lines)
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    result = attnseq("sweep-report", str(basic_sweep), cwd=basic_sweep, env=env)
    assert result.returncode == 0, result.stderr
    # the varied parameter is a column, the constant overrides are not
    assert "optim.lr" in result.stdout and "data.train_size" not in result.stdout
    # no optimized_metric: the value the task function returned, test/<early_stopping_metric>
    assert "sorted by test/exact_match (higher is better)" in result.stdout
    rows = read_csv(basic_sweep / "report.csv")
    assert [row["n"] for row in rows] == ["1", "1"]
    assert sorted(row["optim.lr"] for row in rows) == ["0.001", "0.05"]
    values = [float(row["test/exact_match"]) for row in rows]
    assert values == sorted(values, reverse=True)
    assert (basic_sweep / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_sorts_lower_is_better_metrics_ascending(basic_sweep: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "sweep-report",
            str(basic_sweep),
            "--metric",
            "test/loss",
            "--csv",
            str(tmp_path / "r.csv"),
            "--plot",
            str(tmp_path / "r.svg"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "sorted by test/loss (lower is better)" in result.output
    losses = [float(row["test/loss"]) for row in read_csv(tmp_path / "r.csv")]
    assert losses == sorted(losses) and losses[0] < losses[1]
    assert (tmp_path / "r.svg").read_text().lstrip().startswith("<?xml")


def test_unknown_metric_exits_2(basic_sweep: Path) -> None:
    result = CliRunner().invoke(app, ["sweep-report", str(basic_sweep), "--metric", "test/bleuu"])
    assert result.exit_code == 2
    assert "test/bleu" in result.output  # the valid names are listed


# ------------------------------------------------------------------- a hand-made multirun
def test_report_of_a_hand_made_multirun(fake_sweep: Path) -> None:
    result = CliRunner().invoke(app, ["sweep-report", str(fake_sweep)])
    assert result.exit_code == 0, result.output
    assert "3 of 4 jobs finished" in result.output
    assert "sorted by test/bleu (higher is better)" in result.output
    assert "no metrics.json (failed or still running): 3" in result.output
    table = result.output.split("jobs finished")[1].split("sorted by")[0]
    assert table.index("40.5") < table.index("30.25") < table.index("20 ")
    rows = read_csv(fake_sweep / "report.csv")
    assert [row["job"] for row in rows] == ["1", "2", "0", "3"]
    assert [row["n"] for row in rows] == ["1", "1", "1", "0"]  # job 3 did not finish
    assert list(rows[0])[:4] == ["job", "model", "optim.lr", "n"]  # varied keys only
    assert rows[3]["test/bleu"] == "" and rows[1]["test/loss"] == "1.1"
    assert (fake_sweep / "report.png").is_file()


def test_optuna_results_are_printed(fake_sweep: Path) -> None:
    results = {
        "name": "optuna",
        "best_params": {"model": "transformer", "optim.lr": 0.001},
        "best_value": 40.5,
    }
    (fake_sweep / "optimization_results.yaml").write_text(yaml.safe_dump(results))
    result = CliRunner().invoke(app, ["sweep-report", str(fake_sweep)])
    assert result.exit_code == 0, result.output
    assert "optuna best trial (job 1): model=transformer, optim.lr=0.001  value=40.5" in (
        result.output
    )


def test_a_folder_that_is_not_a_multirun_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sweep-report", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a Hydra multirun folder" in result.output
    (tmp_path / ".hydra").mkdir()  # a single run's folder gets a hint
    result = CliRunner().invoke(app, ["sweep-report", str(tmp_path)])
    assert result.exit_code == 2 and "single run" in result.output
    result = CliRunner().invoke(app, ["sweep-report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "not found" in result.output


# ------------------------------------------------------------
# `attnseq sweep-report` on a hand-made multirun with seeds: jobs that differ only in `seed`
# share a row (mean ± sd, n), several metric columns, wall time from the job's files, and the
# table, CSV, Markdown and LaTeX forms.
runner = CliRunner()


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


@pytest.mark.slow
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
    metrics = ["test/bleu", "test/bleu_sd", "test/chrf", "test/chrf_sd"]
    totals = ["wall_seconds", "finished", "jobs_total"]
    assert list(rows[0]) == ["jobs", "model", "seeds", "n", *metrics, *totals]
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


def test_bad_format_and_metrics_exit_2(seeded_sweep: Path) -> None:
    result = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--format", "html"])
    assert result.exit_code == 2 and "--format must be one of table, csv" in result.stderr
    result = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--metrics", "test/nope"])
    assert result.exit_code == 2 and "test/nope" in result.stderr
    assert "Available: best_step, test/bleu, test/chrf" in result.stderr


# ---------------------------------------------------------- the table on a terminal or pipe
@pytest.fixture
def wide_sweep(tmp_path: Path) -> Path:
    """Three models by two learning rates by three seeds, nine test metrics: a table wider
    than 160 columns."""
    root = tmp_path / "wide"
    root.mkdir()
    (root / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "test/bleu"}))
    names = ("bleu", "chrf", "ter", "exact_match", "rouge1", "loss", "ppl", "length_ratio")
    number = 0
    for model in ("rnn_bahdanau", "transformer", "rnn_luong"):
        for lr in ("0.001", "0.0003"):
            for seed in (1, 2, 3):
                metrics = {f"test/{name}": 10.0 + number for name in names}
                metrics["test/attention/entropy"] = 1.5
                overrides = [f"model={model}", f"optim.lr={lr}", f"seed={seed}"]
                sweep_folders.make_job(root, str(number), overrides, metrics)
                number += 1
    return root


def table_lines(output: str) -> list[str]:
    """The lines of the rich table: its borders and rows."""
    return [line for line in output.splitlines() if line[:1] in "┏┃┡│└"]


@pytest.mark.slow
@pytest.mark.parametrize("columns", [None, "200", "100"])
def test_the_rich_table_never_wraps_inside_a_cell(wide_sweep: Path, columns: str | None) -> None:
    """On a pipe the table has its own width; COLUMNS (a terminal's width) holds it, in parts
    that repeat the jobs and parameters when it is too narrow for one; a cell never breaks."""
    result = runner.invoke(app, ["sweep-report", str(wide_sweep)], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    lines = table_lines(result.stdout)
    if columns is not None:
        assert max(len(line) for line in lines) <= int(columns), result.stdout
    parts = sum(line.startswith("┏") for line in lines)
    assert parts > 1 if columns == "100" else parts == 1, result.stdout
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 6 * parts  # one line per row: no cell continues on another
    assert all(re.match(r"│ +\d │ \d+,\d+,\d+ +│ \w+ +│ 0\.000?[13] +│", row) for row in rows), rows
    for model in ("rnn_bahdanau", "transformer", "rnn_luong"):
        assert sum(f" {model} " in row for row in rows) == 2 * parts
    for metric in ("test/bleu", "test/length_ratio", "test/attention/entropy"):
        shown = "".join(line.strip("┃ ") for line in lines if line.startswith("┃"))
        assert all(part in shown for part in metric.split("/")), (metric, result.stdout)


def test_metrics_choose_the_table_and_the_csv_keeps_every_column(seeded_sweep: Path) -> None:
    result = runner.invoke(app, ["sweep-report", str(seeded_sweep), "--metrics", "best_step"])
    assert result.exit_code == 0, result.output
    header = read_csv(seeded_sweep / "report.csv")[0]
    assert {"test/bleu", "test/chrf", "best_step"} <= set(header)
    assert "test/chrf" not in result.stdout.split("jobs finished")[1].split("wrote")[0]
    assert "every test/* metric column" in result.stdout.split("wrote")[1]


def test_threads_are_set_while_the_runs_decode(
    tmp_path: Path, rnn_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import attnseq.analysis.comparison as comparison
    from attnseq.errors import UserError

    sweep = tmp_path / "sweep"
    for number, (seed, lr) in enumerate([(1, 0.1), (2, 0.1), (1, 0.2), (2, 0.2)]):
        helpers.sweep_job(rnn_checkpoint, sweep / str(number), seed, lr=lr)
    seen = []

    def decoding(*args: object, **kwargs: object) -> None:
        seen.append(torch.get_num_threads())
        raise UserError("stopped before the decoding")

    monkeypatch.setattr(comparison, "load_system", decoding)
    before = torch.get_num_threads()
    args = ["sweep-report", str(sweep), "--significance", "--threads", "2"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "stopped before the decoding" in result.output
    assert seen == [2]
    torch.set_num_threads(before)


def test_a_damaged_eval_result_of_a_run_is_one_line(tmp_path: Path, rnn_checkpoint: Path) -> None:
    from attnseq.config.conversion import config_from_dict
    from attnseq.evaluation.checkpoint_eval import default_root, result_folder
    from attnseq.io.checkpoint import load_checkpoint

    sweep = tmp_path / "sweep"
    for number, (seed, lr) in enumerate([(1, 0.1), (2, 0.1), (1, 0.2), (2, 0.2)]):
        helpers.sweep_job(rnn_checkpoint, sweep / str(number), seed, lr=lr)
    checkpoint = sweep / "0" / "checkpoints" / "best.pt"
    decoding = config_from_dict(load_checkpoint(checkpoint)["config"]).decoding
    cached = result_folder(default_root(checkpoint), checkpoint, None, "test", decoding)
    cached.mkdir(parents=True)
    (cached / "metrics.json").write_text('{"checkpoint": 5}')
    result = runner.invoke(app, ["sweep-report", str(sweep), "--significance"])
    assert result.exit_code == 2, result.output
    assert f"{cached / 'metrics.json'} is damaged" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_outputs_never_replace_what_significance_reads(
    tmp_path: Path, rnn_checkpoint: Path
) -> None:
    sweep = tmp_path / "sweep"
    for number, (seed, lr) in enumerate([(1, 0.1), (1, 0.2)]):
        helpers.sweep_job(rnn_checkpoint, sweep / str(number), seed, lr=lr)
    checkpoint = sweep / "0" / "checkpoints" / "best.pt"
    kept = checkpoint.read_bytes()
    result = runner.invoke(app, ["sweep-report", str(sweep), "--csv", str(checkpoint)])
    assert result.exit_code == 2 and "is the input" in result.output, result.output
    assert checkpoint.read_bytes() == kept
