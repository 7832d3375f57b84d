"""The checks of a run run once each: one `attnseq train` (through Hydra's entry and its
callback) and one `attnseq.train` validate the config, check the trackers' libraries and check
the run directory exactly once; `run_training` called directly still validates."""

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import TINY, attnseq_in_process, tiny_config

import attnseq
from attnseq.config import checks
from attnseq.config.composition import compose
from attnseq.training import run_checks, run_directory, trackers
from attnseq.training.run import run_training

STEPS = [*TINY, "trainer.max_steps=1", "trainer.validate_every=1", "trainer.progress=false"]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each check ran: the cross-field checks, the trackers' libraries, the run
    directory (each module imports them where it calls them, so the count sees every call)."""
    counted: Counter[str] = Counter()

    def counting(name: str, check: Callable[..., None]) -> Callable[..., None]:
        def call(*args: object, **kwargs: object) -> None:
            counted[name] += 1
            check(*args, **kwargs)

        return call

    for module, name in (
        (checks, "validate"),
        (trackers, "check_trackers_installed"),
        (run_directory, "check_run_directory"),
    ):
        monkeypatch.setattr(module, name, counting(name, getattr(module, name)))
    return counted


ONCE = {"validate": 1, "check_trackers_installed": 1, "check_run_directory": 1}


def test_one_attnseq_train_checks_each_thing_once(calls: Counter[str], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = attnseq_in_process("train", *STEPS, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "metrics.json").is_file()
    assert dict(calls) == ONCE


@pytest.mark.slow
def test_one_attnseq_dot_train_checks_each_thing_once(calls: Counter[str], tmp_path: Path) -> None:
    result = attnseq.train(STEPS, run_dir=tmp_path / "run", verbose=False)
    assert result.checkpoint.is_file()
    assert dict(calls) == ONCE


@pytest.mark.slow
def test_run_training_called_directly_validates(calls: Counter[str], tmp_path: Path) -> None:
    cfg = tiny_config("trainer.max_steps=1", "trainer.validate_every=1")
    calls.clear()  # tiny_config validates the config it makes
    run_training(cfg, tmp_path / "run", summary=False)
    assert dict(calls) == {"validate": 1, "check_trackers_installed": 1}
    broken = tiny_config("trainer.max_steps=1")
    broken.model.hidden = 0
    with pytest.raises(attnseq.UserError, match="model.hidden"):
        run_training(broken, tmp_path / "broken", summary=False)
    assert not (tmp_path / "broken" / "checkpoints").exists()


def test_a_passed_start_is_remembered_for_its_run_alone(tmp_path: Path) -> None:
    """The record of a start that passed names its config and run directory, and the run
    uses it up: a second run of the same config checks again."""
    run_dir = tmp_path / "run"
    cfg = run_checks.check_run(compose([*STEPS, f"hydra.run.dir={run_dir}"]), lock=False)
    assert run_checks.passed(cfg, run_dir)
    assert not run_checks.passed(cfg, tmp_path / "other")
    assert not run_checks.passed(dataclasses.replace(cfg, seed=cfg.seed + 1), run_dir)
    run_checks.check_config_once(cfg, run_dir)
    assert not run_checks.passed(cfg, run_dir)


@pytest.mark.slow
def test_a_refused_attnseq_train_leaves_the_folders_its_start_made(tmp_path: Path) -> None:
    """A training refused once it started (no example short enough to train on) removes the
    run directory its start created, outputs/DATE/TIME with its train.log and .hydra/, and
    the folders above it that it created, as attnseq.train does; a folder that was there, or
    another run's, stays."""
    refused = [*STEPS, "data.max_src_len=1", "data.max_tgt_len=1"]
    result = attnseq_in_process("train", *refused, cwd=tmp_path)
    assert result.returncode == 2 and "no training examples left" in result.stderr
    assert not (tmp_path / "outputs").exists(), sorted((tmp_path / "outputs").rglob("*"))
    result = attnseq_in_process(
        "train", *refused, f"hydra.run.dir={tmp_path / 'new' / 'run'}", cwd=tmp_path
    )
    assert result.returncode == 2 and not (tmp_path / "new").exists()
    other = tmp_path / "outputs" / "day" / "other"
    (other / ".hydra").mkdir(parents=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    for run_dir in (tmp_path / "outputs" / "day" / "${now:%H-%M-%S}", mine):
        result = attnseq_in_process("train", *refused, f"hydra.run.dir={run_dir}", cwd=tmp_path)
        assert result.returncode == 2, result.stderr
    assert sorted((tmp_path / "outputs").rglob("*")) == [
        tmp_path / "outputs" / "day",
        other,
        other / ".hydra",
    ]
    assert mine.is_dir()  # the user's own folder: only what Hydra wrote in it is there
