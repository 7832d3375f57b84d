"""benchmarks/benchmark_ct2.py runs end to end on a tiny untrained transformer (its speed figures
are measured on a quiet machine, never asserted here)."""

import json

import pytest
from helpers import load_script, untrained_checkpoint


@pytest.mark.slow
def test_the_benchmark_compares_engines_speed_and_bleu(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (attnseq[ct2])")
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    checkpoint = untrained_checkpoint(
        tmp_path / "model.pt",
        "model.family=transformer",
        "data.name=toy_translation",
        "data.tokenizer=sentencepiece",
        "data.spm_vocab_size=80",
        "data.test_size=6",
        "decoding.max_output_extra=2",
        "decoding.max_output_ratio=0.5",
    )
    arguments = [str(checkpoint), "--device", "cpu", "--threads", "1", "--sentences", "3"]
    script = load_script("benchmarks/benchmark_ct2.py")
    assert script.main([*arguments, "--beam", "2", "--batch-sizes", "2,1"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["results"]
    assert {(r["engine"], r["search"], r["batch_size"]) for r in rows} == {
        (engine, search, size)
        for engine in ("attnseq", "ctranslate2-float32", "ctranslate2-int8")
        for search in ("greedy", "beam2")
        for size in (2, 1)
    }
    for row in rows:
        assert row["sentences"] == 3 and row["sentences_per_second"] > 0
        assert 0 <= row["bleu"] <= 100
    greedy = [r for r in rows if r["engine"] == "ctranslate2-float32" and r["search"] == "greedy"]
    assert all(row["same_as_attnseq"] == 1.0 for row in greedy)  # the same greedy outputs
    assert report["bleu_signature"].startswith("nrefs:1")


def test_an_rnn_checkpoint_exits_2(rnn_checkpoint, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    script = load_script("benchmarks/benchmark_ct2.py")
    assert script.main([str(rnn_checkpoint), "--device", "cpu"]) == 2
    assert "model.family=rnn" in capsys.readouterr().err
