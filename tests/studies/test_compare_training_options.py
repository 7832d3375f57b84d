"""studies/compare_training_options.py trains one run per variant and tabulates them; here two
variants of a tiny transformer on the generated reverse task (the Multi30k figures are in the
README)."""

import json
import subprocess
from pathlib import Path

import pytest
from helpers import TINY_TRANSFORMER, run_script

pytestmark = pytest.mark.slow  # one training per variant


SCRIPT = "studies/compare_training_options.py"
TINY = [
    "config=reverse_transformer",
    *TINY_TRANSFORMER,
    "data.train_size=60",
    "data.max_tokens=60",
    "trainer.max_steps=4",
]


def _run(out: Path, *arguments: str) -> subprocess.CompletedProcess:
    return run_script(
        SCRIPT,
        "--out",
        str(out),
        "--variant",
        "plain",
        "--variant",
        "grouped=optim.accumulate=2 optim.ema_decay=0.5",
        "--metrics",
        "exact_match",
        "bleu",
        "--json",
        str(out / "rows.json"),
        *arguments,
    )


def test_one_run_per_variant_a_table_and_curves(tmp_path: Path) -> None:
    out = tmp_path / "options"
    result = _run(out, "--run", "--figure", str(out / "curves.png"), "--", *TINY)
    assert result.returncode == 0, result.stderr
    rows = {row["run"]: row for row in json.loads((out / "rows.json").read_text())}
    assert list(rows) == ["plain", "grouped"]
    for row in rows.values():
        assert row["updates"] == 4 and row["seconds_per_epoch"] > 0
        assert set(row["test"]) == {"exact_match", "bleu"}
        assert [step for step, _ in row["curves"]["loss"]] == [2, 4]
    # two batches per update: an epoch takes half as many updates
    assert "2 per update" in (out / "grouped" / "train.log").read_text()
    assert "| grouped |" in result.stdout and "test exact_match" in result.stdout
    assert (out / "curves.png").stat().st_size > 0
    # a second call tabulates the finished runs instead of training again
    again = _run(out, "--run", "--", *TINY)
    assert again.returncode == 0 and "training:" not in again.stderr
    assert "done already" in again.stderr


def test_no_finished_run_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "options").mkdir()
    result = _run(tmp_path / "options")
    assert result.returncode != 0 and "no finished run" in result.stderr
