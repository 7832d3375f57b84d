"""Sweeps: `attnseq sweep-report` on real and hand-made multirun folders, the joblib launcher,
the Optuna sweeper (hparams_search/), the SLURM launcher's composition, and the messages for a
plugin that is not installed. The basic multirun and the refusals run `attnseq train` in this
process (helpers.attnseq_in_process); the joblib and Optuna sweeps, and one sweep-report, run
`attnseq` in subprocesses through the console entry point."""

import csv
import importlib.util
import io
import json
import os
import statistics
from pathlib import Path

import helpers
import pytest
import yaml
from helpers import attnseq, attnseq_in_process
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.choices import higher_is_better
from attnseq.config.schema import TrainConfig, register_configs
from attnseq.training.sweep_report import (
    latex_escape,
    load_report,
    metric_columns,
    render,
    report_rows,
    short_value,
)

TINY = [*helpers.TINY, "trainer.max_steps=4", "trainer.validate_every=2"]
HAS_OPTUNA = importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None
HAS_SUBMITIT = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
HAS_JOBLIB = importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None


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


def test_report_of_a_basic_multirun(basic_sweep: Path) -> None:
    result = attnseq("sweep-report", str(basic_sweep), cwd=basic_sweep)
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
def make_job(root: Path, name: str, overrides: list[str], metrics: dict | None) -> None:
    hydra_dir = root / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if metrics is not None:
        (root / name / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def fake_sweep(tmp_path: Path) -> Path:
    """Jobs 0-2 finished, job 3 without metrics.json; optimized_metric = test/bleu."""
    root = tmp_path / "multirun" / "2026-11-22" / "10-00-00"
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "test/bleu"}))
    common = ["data=reverse", "trainer.max_steps=100"]
    make_job(
        root,
        "0",
        ["model=rnn_luong", "optim.lr=0.001", *common],
        {"test/bleu": 20.0, "test/loss": 1.5, "best_step": 100},
    )
    make_job(
        root,
        "1",
        ["model=transformer", "optim.lr=0.001", *common],
        {"test/bleu": 40.5, "test/loss": 1.2, "best_step": 80},
    )
    make_job(
        root,
        "2",
        ["model=rnn_luong", "optim.lr=0.0003", *common],
        {"test/bleu": 30.25, "test/loss": 1.1, "best_step": 100},
    )
    make_job(root, "3", ["model=transformer", "optim.lr=0.0003", *common], None)
    return root


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


def test_metric_direction_and_ranking(fake_sweep: Path) -> None:
    assert not higher_is_better("test/loss") and not higher_is_better("valid/aer")
    assert not higher_is_better("test/ppl") and higher_is_better("test/rouge_l")
    report = load_report(fake_sweep, "test/loss")
    assert [job.name for job in report.jobs] == ["2", "1", "0", "3"]
    assert report.varied == ["model", "optim.lr"]
    assert short_value("0.0006824078427098838") == "0.0006824" and short_value("128") == "128"


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


# ------------------------------------------------------------------------- launchers
@pytest.mark.skipif(not HAS_JOBLIB, reason="hydra-joblib-launcher is not installed")
@pytest.mark.slow  # parallel trainings in subprocesses
def test_joblib_launcher_runs_jobs_in_parallel(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = attnseq(
        "train",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "data=reverse,copy",
        *TINY,
        f"hydra.sweep.dir={sweep_dir}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "Joblib.Parallel(n_jobs=2" in result.stdout + result.stderr
    spans = []
    for job in ["0", "1"]:
        assert (sweep_dir / job / "metrics.json").is_file()
        lines = (sweep_dir / job / "train.log").read_text().splitlines()
        spans.append((lines[0][:25], lines[-1][:25]))  # "[YYYY-MM-DD HH:MM:SS,mmm]"
    (start0, end0), (start1, end1) = spans
    assert start0 <= end1 and start1 <= end0, f"the jobs did not overlap: {spans}"
    result = CliRunner().invoke(app, ["sweep-report", str(sweep_dir)])
    assert result.exit_code == 0, result.output
    assert "reverse" in result.output and "copy" in result.output


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hydra/sweeper=nevergrad", "the Hydra sweeper plugin is not installed"),
        ("hydra/launcher=no_such_launcher", "the Hydra launcher plugin is not installed"),
    ],
)
def test_a_missing_plugin_exits_2_with_a_clear_message(
    override: str, message: str, tmp_path: Path
) -> None:
    result = attnseq_in_process("train", "-m", override, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:") and message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(
    not HAS_SUBMITIT,
    reason="hydra-submitit-launcher is not installed (pip install 'attnseq[slurm]')",
)
def test_slurm_launcher_composes(tmp_path: Path) -> None:
    result = attnseq_in_process(
        "train",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.timeout_min=60",
        "hydra.launcher.gpus_per_node=1",
        "--cfg",
        "hydra",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    launcher = yaml.safe_load(result.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert (launcher["partition"], launcher["timeout_min"]) == ("gpu", 60)


# ---------------------------------------------------------------------------------- Optuna
@pytest.mark.skipif(not HAS_OPTUNA, reason="hydra-optuna-sweeper is not installed")
@pytest.mark.parametrize("name", ["reverse_optuna", "transformer_optuna"])
def test_hparams_search_configs_compose(name: str) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        composed = compose("train", overrides=[f"hparams_search={name}"], return_hydra_config=True)
    sweeper = composed.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "maximize" and sweeper.n_jobs == 1
    assert sweeper.sampler.seed == 1 and "optim.lr" in sweeper.params
    with open_dict(composed):
        del composed["hydra"]  # the schema has no `hydra` key
    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, TrainConfig) and cfg.optimized_metric == "test/exact_match"


@pytest.mark.skipif(not HAS_OPTUNA, reason="hydra-optuna-sweeper is not installed")
@pytest.mark.slow  # an Optuna sweep of trainings
def test_optuna_sweep_reports_the_best_trial(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = attnseq(
        "train",
        "-m",
        "hparams_search=reverse_optuna",
        "hydra.sweeper.n_trials=2",
        *TINY,  # model.hidden and model.emb_dim fixed here: Optuna samples lr and dropout
        f"hydra.sweep.dir={sweep_dir}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert set(best["best_params"]) == {"optim.lr", "model.dropout"}
    result = CliRunner().invoke(app, ["sweep-report", str(sweep_dir)])
    assert result.exit_code == 0, result.output
    assert "2 of 2 jobs finished" in result.output
    assert "sorted by test/exact_match" in result.output
    assert "optuna best trial (job " in result.output
    assert "optim.lr" in read_csv(sweep_dir / "report.csv")[0]


def test_missing_plugin_hint_names_an_extra_that_exists() -> None:
    """The hint for a documented plugin names the pyproject extra that really installs it."""
    import tomllib

    from attnseq.config.composition import PLUGIN_EXTRAS

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    for choice, extra in PLUGIN_EXTRAS.items():
        assert extra in extras, choice
        assert any(choice.split("_")[0] in requirement for requirement in extras[extra]), choice


def test_interval_sweeps_are_checked_before_the_sweeper_starts() -> None:
    """An Optuna search space is checked at its interval ends: a misspelt key or a value of the
    wrong type is a clear error before any trial runs."""
    from helpers import check_train_args

    from attnseq.cli.preflight import sweep_variants
    from attnseq.errors import UserError

    variants = sweep_variants(["model.hidden=int(interval(16,64))", "seed=1,2"])
    assert ["model.hidden=64", "seed=1"] in variants and ["model.hidden=16", "seed=2"] in variants
    check_train_args(["-m", "optim.lr=tag(log, interval(1e-4, 1e-2))"])
    with pytest.raises(UserError, match="Did you mean 'optim.lr'"):
        check_train_args(["-m", "optim.lrr=interval(0.0001, 0.01)"])
    with pytest.raises(UserError, match="model.dropout"):
        check_train_args(["-m", "model.dropout=interval(0.0, 1.5)"])


# ------------------------------------------------------------
# `attnseq sweep-report` on a hand-made multirun with seeds: jobs that differ only in `seed`
# share a row (mean ± sd, n), several metric columns, wall time from the job's files, and the
# table, CSV, Markdown and LaTeX forms.

runner = CliRunner()
# model -> seed -> (test/bleu, test/chrf); transformer seed 3 never finished
RESULTS = {
    "rnn": {1: (20.0, 40.0), 2: (22.0, 41.0), 3: (24.0, 45.0)},
    "transformer": {1: (30.0, 50.0), 2: (34.0, 52.0), 3: None},
}


def make_timed_job(root: Path, name: str, overrides: list[str], metrics: dict | None, minutes: int):
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
            make_timed_job(root, str(number), overrides, metrics, minutes=2 + number)
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
        make_timed_job(
            root, str(number), [f"optim.lr={lr}"], {"test/loss": 1.0 + number}, minutes=1
        )
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
