"""`attnseq eval` (attnseq/cli/eval_command.py): its refusals, and the metrics a real `attnseq
train` printed, reproduced by evaluating its best checkpoint in a subprocess."""

import json
from pathlib import Path

import helpers
import pytest
from helpers import attnseq, one_error_line
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.evaluation.metrics import bleu_signature

TINY = [*helpers.TINY, "trainer.max_steps=4", "trainer.validate_every=2"]


def test_eval_of_a_missing_checkpoint_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "missing.pt")])
    assert result.exit_code == 2
    assert "checkpoint not found" in result.output


@pytest.mark.slow
def test_train_then_eval_reproduces_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = attnseq("train", *TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "run directory" in result.stdout
    assert f"BLEU signature {bleu_signature()}" in result.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (run_dir / "train.log").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    result = attnseq(
        "eval",
        str(run_dir / "checkpoints" / "best.pt"),
        "--out",
        str(tmp_path / "eval"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert ["BLEU", "signature", bleu_signature()] in [line.split() for line in lines]
    folder = tmp_path / "eval" / f"best-step{metrics['best_step']}" / "test.greedy"
    assert lines[-1] == f"wrote {folder}/ (hyps.txt, metrics.json, refs.txt)"
    printed = {
        line.split()[0]: float(line.split()[1]) for line in lines if line.split()[0] in metrics
    }
    assert "test/bleu" in printed
    for key, value in printed.items():
        assert value == pytest.approx(metrics[key], abs=1e-4), key


def test_eval_of_an_unknown_split_lists_the_splits(rnn_checkpoint, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "eval")
    result = CliRunner().invoke(app, ["eval", str(rnn_checkpoint), "--split", "dev", "--out", out])
    assert result.exit_code == 2
    line = one_error_line(result.stderr, "unknown split 'dev'", "has the splits train, valid, test")
    assert "--split also takes a data file" in line


def test_eval_of_a_generated_task_too_large_to_make_is_refused(rnn_checkpoint, tmp_path) -> None:
    """eval makes every split of a generated task (each depends on the others) to read one:
    data.train_size=2147483648 would generate for hours; refused as training refuses it."""
    arguments = [str(rnn_checkpoint), "data.train_size=2147483648", "--out", str(tmp_path / "eval")]
    result = CliRunner().invoke(app, ["eval", *arguments])
    assert result.exit_code == 2
    one_error_line(result.stderr, "the generated data does not fit: data.train_size=2147483648")
    assert not (tmp_path / "eval").exists()
