"""benchmarks/loss_trajectory.py: a record of the first updates of an experiment, compared bit for
bit with a second run."""

import json
from pathlib import Path

import pytest
from helpers import load_script

pytestmark = pytest.mark.slow  # two 30-update runs of three experiments


def test_differences_name_each_update_and_the_weights() -> None:
    script = load_script("benchmarks/loss_trajectory.py")
    before = {"a": {"losses": {"1": "0x1p+0", "2": "0x1p+1"}, "weights": "x"}, "b": {}}
    after = {"a": {"losses": {"1": "0x1p+0", "2": "0x1.8p+1", "3": "0x1p+0"}, "weights": "y"}}
    assert script.differences(before, after) == [
        "a update 2: loss 0x1p+1 -> 0x1.8p+1",
        "a update 3: loss None -> 0x1p+0",
        "a: final weights differ",
        "b: not run",
    ]
    assert script.differences({"a": before["a"]}, {"a": before["a"]}) == []


def test_two_runs_of_an_experiment_are_bitwise_identical(tmp_path: Path) -> None:
    script = load_script("benchmarks/loss_trajectory.py")
    record = tmp_path / "record.json"
    arguments = ["--steps", "2", "--configs", "reverse_rnn_bahdanau"]
    assert script.main(["record", str(record), *arguments]) == 0
    saved = json.loads(record.read_text())["reverse_rnn_bahdanau"]
    assert sorted(saved["losses"]) == ["1", "2"] and len(saved["weights"]) == 64
    assert script.main(["compare", str(record), "--steps", "2"]) == 0
