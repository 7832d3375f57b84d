"""studies/compare_summarizers.py end to end on AESLC (../shared/data) with tiny models and two
updates: the lead baseline, both models, the table and the reuse of finished runs (`-m slow`).
The real figures are in the README."""

import json
import statistics
import subprocess
from pathlib import Path

import pytest
from helpers import TINY_SUMMARIZER, run_script

SCRIPT = "studies/compare_summarizers.py"
TINY = [*TINY_SUMMARIZER, "data.max_examples=64"]


def _run(out: Path, *arguments: str) -> subprocess.CompletedProcess:
    return run_script(SCRIPT, "--out", str(out), "--datasets", "aeslc", *arguments, timeout=600)


def _lead_rouge_l(data: Path) -> tuple[int, float]:
    """The lead baseline computed here directly: N = mean training reference length in words."""

    def read(split: str) -> list[dict[str, str]]:
        lines = (data / "aeslc" / f"{split}.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    from rouge_score import rouge_scorer  # its import (nltk) takes seconds: only where needed

    n_words = round(statistics.fmean(len(row["tgt"].split()) for row in read("train")))
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    scores = [
        scorer.score(row["tgt"], " ".join(row["src"].split()[:n_words]))["rougeL"].fmeasure
        for row in read("test")
    ]
    return n_words, 100 * statistics.fmean(scores)


@pytest.mark.slow  # about 1.5 minutes: four decodes of AESLC's 980 valid/test emails
def test_lead_attention_and_pointer_generator_rows(tmp_path, shared_data):
    result = _run(tmp_path, "--", *TINY)
    assert result.returncode == 0, result.stderr
    (lead, attention, pointer) = json.loads((tmp_path / "results.json").read_text())["aeslc"]
    n_words, rouge_l = _lead_rouge_l(shared_data)
    assert lead["name"] == f"lead-{n_words}"
    assert abs(lead["rouge_l"] - rouge_l) < 1e-9
    assert attention["name"] == "attention" and attention["p_gen_mean"] is None
    assert pointer["name"] == "pointer-generator + coverage"
    assert 0 <= pointer["p_gen_mean"] <= 1
    for row in (attention, pointer):
        assert row["updates"] == 2 and row["minutes"] > 0
        assert "trainer.max_steps=2" in row["command"]
        assert all(0 <= row[key] <= 100 for key in ("rouge1", "rouge2", "rouge_l"))
    summary = (tmp_path / "summary.md").read_text()
    assert "| pointer-generator + coverage |" in summary and "Overrides for every model" in summary
    # --reuse keeps the finished runs: no training, the same scores
    again = _run(tmp_path, "--reuse", "--", *TINY)
    assert again.returncode == 0, again.stderr
    rows = json.loads((tmp_path / "results.json").read_text())["aeslc"]
    assert [row["rouge_l"] for row in rows] == [
        row["rouge_l"] for row in (lead, attention, pointer)
    ]
    assert rows[1]["minutes"] == attention["minutes"] and "training:" not in again.stderr
