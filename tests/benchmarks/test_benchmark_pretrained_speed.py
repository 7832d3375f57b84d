"""benchmarks/benchmark_pretrained_speed.py runs end to end at tiny shapes (--quick) and writes
its JSON and page (its figures are measured on an idle machine, never asserted here)."""

import json
import os

import pytest
from helpers import load_script, run_script

for package in ("transformers", "ctranslate2", "sentencepiece", "tokenizers"):
    pytest.importorskip(package, reason=f"{package} not installed")

SCRIPT = "benchmarks/benchmark_pretrained_speed.py"
NEW_TOKENS = 3


@pytest.mark.slow  # builds two stand-ins, decodes with four systems, trains with two
def test_quick_run_writes_every_row_the_ratios_and_the_page(tmp_path, shared_data):
    out = tmp_path / "results"
    arguments = ["--quick", "--sentences", "5", "--batch-size", "3", "--beam", "2"]
    arguments += ["--new-tokens", str(NEW_TOKENS), "--max-tokens", "400", "--steps", "1"]
    arguments += ["--warmup", "1", "--repeats", "2", "--threads", "1", "--train-pairs", "200"]
    arguments += ["--data", str(shared_data), "--out-dir", str(out), "--profile"]
    os.environ.setdefault("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    result = run_script(SCRIPT, *arguments, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "pretrained_speed.json").read_text())
    rows = report["results"]
    decoding = [row for row in rows if row["task"] == "decoding"]
    training = [row for row in rows if row["task"] == "training"]
    assert {(row["model"], row["search"], row["system"]) for row in decoding} == {
        (model, search, system)
        for model in ("opus-mt-base", "bart-base")
        for search in ("greedy", "beam2")
        for system in ("attnseq", "transformers", "ctranslate2-float32", "ctranslate2-int8")
    }
    for row in decoding:  # every system produced exactly the fixed length for every sentence
        assert row["sentences"] == 5 and row["mean_output_tokens"] == NEW_TOKENS, row
        assert len(row["all_rates"]) == 2 and row["tokens_per_second"] > 0
    assert {(row["model"], row["system"]) for row in training} == {
        (model, system)
        for model in ("opus-mt-base", "bart-base")
        for system in ("attnseq", "transformers")
    }
    for row in training:
        assert row["tokens_per_second"] > 0 and row["peak_rss_mib"] > 0
        assert 0 < row["target_tokens_per_update"] <= 400
    for row in rows:
        ours = next(
            mine["tokens_per_second"]
            for mine in rows
            if mine["system"] == "attnseq"
            and (mine["model"], mine["task"], mine["search"])
            == (row["model"], row["task"], row["search"])
        )
        assert row["attnseq_ratio"] == pytest.approx(
            ours / row["tokens_per_second"], rel=1e-2, abs=1e-3
        )
    assert report["host"]["threads"] == 1 and report["settings"]["quick"] is True
    assert set(report["profiles"]["bart-base"]) == {"decoding greedy", "decoding beam2", "training"}

    page = (out / "pretrained_speed.md").read_text()
    assert "benchmarks/benchmark_pretrained_speed.py --quick" in page  # the command
    assert "torch " in page and "ctranslate2 " in page  # the host's versions
    table = [line for line in page.splitlines() if line.startswith("| opus-mt-base |")]
    table += [line for line in page.splitlines() if line.startswith("| bart-base |")]
    assert len(table) == len(rows)
    assert sum(line.count("x |") for line in table) == len(rows) - 6  # a ratio but on attnseq's
    assert "- attnseq / transformers: " in page and "ahead in " in page  # the summary
    assert "### bart-base, training" in page


def test_unknown_model_and_bad_numbers_are_refused(capsys):
    script = load_script(SCRIPT)
    for arguments, message in (
        (["--models", "opus-mt-big"], "opus-mt-big unknown"),
        (["--repeats", "0"], "must be >= 1"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            script.main(arguments)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
