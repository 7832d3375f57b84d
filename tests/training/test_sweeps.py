"""Sweeps of `attnseq train -m`: the joblib launcher, the Optuna sweeper (hparams_search/), the
SLURM launcher's composition, the messages for a plugin that is not installed, and interval
search spaces checked before the sweeper starts. The refusals run `attnseq train` in this process
(helpers.attnseq_in_process); the joblib and Optuna sweeps run `attnseq` in subprocesses through
the console entry point."""

import csv
import importlib.util
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
from attnseq.config.schema import TrainConfig, register_configs

TINY = [*helpers.TINY, "trainer.max_steps=4", "trainer.validate_every=2"]
HAS_OPTUNA = importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None
HAS_SUBMITIT = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
HAS_JOBLIB = importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


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
