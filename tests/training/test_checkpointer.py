"""trainer.keep_last=N: the last N saves stay as checkpoints/step_STEP.pt (older ones deleted,
best.pt and last.pt never), `attnseq average` averages them, and retention carries on across
an exact resume."""

import json
import os
from pathlib import Path

import pytest
import torch
from helpers import tiny_config
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.errors import UserError
from attnseq.io.checkpoint import keep_step_checkpoint, load_checkpoint, prune_step_checkpoints
from attnseq.training.run import run_training

# a save (last.pt, hence a step file) after every update
SAVES = ["trainer.save_every_steps=1", "trainer.validate_every=4", "trainer.num_heatmaps=1"]


def step_files(run_dir: Path) -> list[str]:
    return sorted(path.name for path in (run_dir / "checkpoints").glob("step_*.pt"))


@pytest.mark.slow
def test_keep_last_keeps_the_newest_step_checkpoints(tmp_path: Path) -> None:
    run_training(tiny_config(*SAVES, "trainer.max_steps=8", "trainer.keep_last=3"), tmp_path)
    checkpoints = tmp_path / "checkpoints"
    assert step_files(tmp_path) == ["step_6.pt", "step_7.pt", "step_8.pt"]
    assert (checkpoints / "best.pt").is_file() and (checkpoints / "last.pt").is_file()
    for step in (6, 7, 8):
        assert load_checkpoint(checkpoints / f"step_{step}.pt")["progress"]["step"] == step
    last = load_checkpoint(checkpoints / "last.pt")
    newest = load_checkpoint(checkpoints / "step_8.pt")
    torch.testing.assert_close(last["model"], newest["model"], rtol=0, atol=0)
    assert not list(checkpoints.glob(".*.tmp"))


@pytest.mark.slow
def test_keep_last_off_writes_no_step_checkpoints(tmp_path: Path) -> None:
    run_training(tiny_config(*SAVES, "trainer.max_steps=3"), tmp_path)
    assert step_files(tmp_path) == []


def test_negative_keep_last_is_a_user_error() -> None:
    with pytest.raises(UserError, match="trainer.keep_last must be >= 0"):
        tiny_config("trainer.keep_last=-1")


@pytest.mark.slow
def test_average_of_the_step_checkpoints_evaluates(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(tiny_config(*SAVES, "trainer.max_steps=6", "trainer.keep_last=3"), run_dir)
    steps = sorted((run_dir / "checkpoints").glob("step_*.pt"))
    assert len(steps) == 3
    averaged = run_dir / "checkpoints" / "averaged.pt"
    runner = CliRunner()
    result = runner.invoke(app, ["average", *map(str, steps), "--out", str(averaged)])
    assert result.exit_code == 0, result.output
    weights = [load_checkpoint(path)["model"] for path in steps]
    for name, tensor in load_checkpoint(averaged)["model"].items():
        if tensor.is_floating_point():
            expected = sum(w[name].double() for w in weights) / 3
            torch.testing.assert_close(tensor, expected.to(tensor.dtype))
    evaluated = runner.invoke(app, ["eval", str(averaged), "--out", str(tmp_path / "eval")])
    assert evaluated.exit_code == 0, evaluated.output
    assert "test/bleu" in evaluated.output
    record = json.loads(
        (tmp_path / "eval" / "averaged" / "test.greedy" / "metrics.json").read_text()
    )
    assert record["averaged_from"] == [str(path) for path in steps]
    assert record["checkpoint_step"] is None


@pytest.mark.slow
def test_retention_survives_an_exact_resume(tmp_path: Path) -> None:
    settings = [*SAVES, "model.dropout=0.3", "trainer.keep_last=3"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    run_training(tiny_config(*settings, "trainer.max_steps=9"), straight)
    run_training(tiny_config(*settings, "trainer.max_steps=5"), split)
    assert step_files(split) == ["step_3.pt", "step_4.pt", "step_5.pt"]
    run_training(tiny_config(*settings, "trainer.max_steps=9", "resume=auto"), split)
    assert step_files(split) == step_files(straight) == ["step_7.pt", "step_8.pt", "step_9.pt"]
    for name in step_files(straight):
        a = load_checkpoint(straight / "checkpoints" / name)
        b = load_checkpoint(split / "checkpoints" / name)
        torch.testing.assert_close(a["model"], b["model"], rtol=1e-6, atol=1e-7)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_new_step_file_is_whole_and_never_replaced_by_a_later_save(tmp_path: Path) -> None:
    last = write(tmp_path / "last.pt", "step 5")
    target = keep_step_checkpoint(last, 5, keep=2)
    assert target == tmp_path / "step_5.pt" and target.read_text() == "step 5"
    # last.pt is replaced atomically by the next save: the step file keeps its own content
    os.replace(write(tmp_path / ".last.pt.x.tmp", "step 6"), last)
    keep_step_checkpoint(last, 6, keep=2)
    os.replace(write(tmp_path / ".last.pt.y.tmp", "step 7"), last)
    keep_step_checkpoint(last, 7, keep=2)
    contents = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert contents == {"last.pt": "step 7", "step_6.pt": "step 6", "step_7.pt": "step 7"}


def test_pruning_leaves_files_of_a_further_run_and_other_names(tmp_path: Path) -> None:
    for step in (2, 4, 6, 20, 30):
        write(tmp_path / f"step_{step}.pt", str(step))
    keep = [write(tmp_path / name, "x") for name in ("best.pt", "last.pt", "step_x.pt")]
    removed = prune_step_checkpoints(tmp_path, step=6, keep=2)
    assert removed == [tmp_path / "step_2.pt"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(
        ["step_4.pt", "step_6.pt", "step_20.pt", "step_30.pt"] + [p.name for p in keep]
    )
