"""benchmarks/profile_training.py runs end to end on a tiny setup; its shares are measured on a
quiet machine and reported in the README, never asserted here."""

import json
import subprocess

import pytest
from helpers import run_script

pytestmark = pytest.mark.slow  # a profiled training


SCRIPT = "benchmarks/profile_training.py"
# 40 examples make one or two batches per epoch, so the profiled updates span several epochs
TINY = "data.train_size=40 model.emb_dim=16 model.hidden=32 model.enc_hidden=16"


def _run(*arguments: str) -> subprocess.CompletedProcess:
    return run_script(SCRIPT, "--threads", "1", *arguments)


def test_profile_splits_updates_into_phases_and_operators(tmp_path):
    out = tmp_path / "profile.json"
    result = _run("--steps", "4", "--warmup", "1", "--top", "5", "--out", str(out), TINY)
    assert result.returncode == 0, result.stderr
    (report,) = json.loads(out.read_text())["results"]
    assert report["model"] == "RNNSeq2Seq" and report["steps"] == 4
    phases = report["phases_percent"]
    assert {"forward + loss", "backward", "optimizer step", "other"} <= set(phases)
    assert all(share >= 0 for share in phases.values())
    assert 95 <= sum(phases.values()) <= 105  # shares of one wall time (rounding aside)
    assert phases["backward"] > 0 and phases["forward + loss"] > 0
    operators = report["top_operators"]
    assert len(operators) == 5 and all(row["operator"] and row["calls"] > 0 for row in operators)
    assert [row["self_cpu_share"] for row in operators] == sorted(
        (row["self_cpu_share"] for row in operators), reverse=True
    )
    assert "| operator | self CPU % | calls |" in result.stdout


def test_profile_rejects_a_bad_override():
    result = _run("--steps", "1", "model.no_such_key=1")
    assert result.returncode == 2
    assert "no_such_key" in result.stderr
