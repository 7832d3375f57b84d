"""studies/compare_ensemble.py end to end on two tiny checkpoints: one row per model and beam,
each the BLEU of the eval result it names, the ensemble's equal to `attnseq eval A.pt B.pt`."""

import json
from pathlib import Path

import pytest
from helpers import load_script, untrained_checkpoint, with_fresh_weights


@pytest.mark.slow
def test_compare_ensemble_writes_a_row_per_model_and_beam(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = untrained_checkpoint(tmp_path / "a.pt", "data.test_size=4")
    with_fresh_weights(first, tmp_path / "b.pt", seed=3)
    load_script("studies/compare_ensemble.py").main(
        [
            str(first),
            str(tmp_path / "b.pt"),
            "--beams",
            "1",
            "2",
            "--out",
            str(tmp_path / "eval"),
            "--device",
            "cpu",
            "--json",
            str(tmp_path / "rows.json"),
        ]
    )
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [(row["kind"], row["beam"]) for row in rows] == [
        ("alone", 1),
        ("alone", 2),
        ("alone", 1),
        ("alone", 2),
        ("ensemble", 1),
        ("ensemble", 2),
    ]
    for row in rows:
        record = json.loads((Path(row["result"]) / "metrics.json").read_text())
        assert record["test/bleu"] == row["bleu"] and record["decoding"]["beam"] == row["beam"]
        assert ("ensemble" in record) == (row["kind"] == "ensemble")
    assert rows[-1]["result"].endswith("test.beam2-lp1+ensemble2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| model | decoding | test BLEU | chrF | loss |" and len(lines) == 8
