"""benchmarks/benchmark_explain.py runs end to end on a tiny checkpoint (its figures are
measured on a quiet machine, never asserted here: speed is not a test's business)."""

import json
import subprocess

import pytest
from helpers import run_script

pytestmark = pytest.mark.slow  # timed explanations by every method

SCRIPT = "benchmarks/benchmark_explain.py"


def run(*arguments: str) -> subprocess.CompletedProcess:
    return run_script(SCRIPT, "--threads", "1", *arguments)


def test_times_explain_and_each_method(transformer_checkpoint) -> None:
    methods = "attention,gradient-x-input,smoothgrad"
    result = run(
        str(transformer_checkpoint), "--copies", "3", "--tgt", "1990-11", "--methods", methods
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["source_pieces"] == 6 and report["output_pieces"] == [7]
    assert [row["method"] for row in report["methods"]] == methods.split(",")
    assert report["explain_seconds"] > 0 and all(row["seconds"] > 0 for row in report["methods"])
    bad = run(str(transformer_checkpoint), "--repeat", "0")
    assert bad.returncode == 2 and "--repeat must be at least 1" in bad.stderr
