"""benchmarks/benchmark_attention_scaling.py at tiny n: every kind of AttentionKind is measured
(time and peak memory) in its own subprocess and tabulated; the real table is in
docs/results/efficient_attention.md."""

import json
import subprocess
import sys

import pytest
from helpers import REPO

from attnseq.config.choices import AttentionKind

SCRIPT = REPO / "benchmarks" / "benchmark_attention_scaling.py"


def test_the_kinds_are_those_of_the_config(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--kinds", "sparse", "--sizes", "64"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    valid = result.stderr.strip().splitlines()[-1].split("valid: ")[1].split(", ")
    assert valid == ["full", "full_explicit"] + [k.value for k in AttentionKind][1:]


@pytest.mark.slow
def test_bigbird_and_full_at_tiny_sizes(tmp_path):
    command = [
        sys.executable,
        str(SCRIPT),
        "--sizes",
        "64,128",
        "--kinds",
        "full,bigbird",
        "--repeats",
        "1",
        "--block-size",
        "16",
        "--d-model",
        "32",
        "--heads",
        "2",
        "--out-dir",
        str(tmp_path),
        "--json",
        str(tmp_path / "scaling.json"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "scaling.json").read_text())["results"]
    assert [(row["kind"], row["n"]) for row in rows] == [
        ("full", 64),
        ("full", 128),
        ("bigbird", 64),
        ("bigbird", 128),
    ]
    assert all(row["seconds"] > 0 and row["peak_mb"] >= 0 for row in rows)
    table = (tmp_path / "attention_scaling.md").read_text()
    assert "| n | full | bigbird |" in table and "bigbird b = 16" in table
    assert (tmp_path / "attention_scaling.png").stat().st_size > 0
