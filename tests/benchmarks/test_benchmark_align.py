"""benchmarks/benchmark_align.py runs end to end on a tiny checkpoint (its figures are measured on
a quiet machine, never asserted here: speed is not a test's business)."""

import json
import subprocess
from pathlib import Path

import pytest
from helpers import run_script, untrained_checkpoint

pytestmark = pytest.mark.slow  # timed alignment of several methods


SCRIPT = "benchmarks/benchmark_align.py"


def run(*arguments: str) -> subprocess.CompletedProcess:
    return run_script(SCRIPT, "--threads", "1", *arguments)


def test_times_each_method_over_the_given_pairs(tmp_path: Path) -> None:
    pairs = [("a b c", "x y"), ("b c", "y z w"), ("", "x"), ("c a", "w x")] * 5
    src, tgt = tmp_path / "in.src", tmp_path / "in.tgt"
    src.write_text("".join(a + "\n" for a, _ in pairs))
    tgt.write_text("".join(b + "\n" for _, b in pairs))
    checkpoint = untrained_checkpoint(
        tmp_path / "model.pt", "model.family=transformer", "data.tokenizer=word", pairs=pairs
    )
    result = run(
        str(checkpoint),
        "--src",
        str(src),
        "--tgt",
        str(tgt),
        "--pairs",
        "12",
        "--warmup",
        "2",
        "--batch-size",
        "4",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = report["results"]
    assert [row["method"].split(",")[0] for row in rows] == ["attention", "shift-att"]
    timed = [(a, b) for a, b in pairs if a][:12]  # the empty source is left out
    for row in rows:
        assert row["pairs"] == 12 and row["pairs_per_second"] > 0
        assert row["links"] == sum(len(b.split()) for _, b in timed)  # one per target word
    bad = run(str(checkpoint), "--src", str(src), "--methods", "viterbi")
    assert bad.returncode == 2 and "--src and --tgt go together" in bad.stderr
