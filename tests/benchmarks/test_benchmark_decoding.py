"""benchmarks/benchmark_decoding.py runs end to end, idle and beside a competing job, and writes
its table (its figures are measured on a known machine, never asserted here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

pytestmark = pytest.mark.slow  # decodes idle and beside a competing process

SCRIPT = REPO / "benchmarks" / "benchmark_decoding.py"


def test_times_each_setting_idle_and_loaded_and_writes_the_table(tmp_path: Path) -> None:
    table = tmp_path / "threads.md"
    command = [
        sys.executable,
        str(SCRIPT),
        "--threads",
        "default,1",
        "--sentences",
        "3",
        "--batch-sizes",
        "2",
        "--loaded",
        "--load-threads",
        "1",
        "--load-warmup",
        "0",
        "--markdown",
        str(table),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = report["results"]
    # 3 families x 2 thread settings x (greedy, beam5) x 1 batch size, in both conditions
    assert len(rows) == 2 * 3 * 2 * 2
    assert {row["condition"] for row in rows} == {"idle", "loaded"}
    assert {row["thread_setting"] for row in rows} == {"default", "1"}
    assert all(row["threads"] >= 1 and row["sentences_per_second"] > 0 for row in rows)
    assert all(row["threads"] == 1 for row in rows if row["thread_setting"] == "1")
    assert report["competing_job_threads"] == 1 and report["cores"] >= 1
    lines = table.read_text().splitlines()
    assert lines[0].startswith("| model | threads | search | batch | idle sent/s | loaded")
    assert len(lines) == 2 + 3 * 2 * 2 and all(line.endswith("x |") for line in lines[2:])
