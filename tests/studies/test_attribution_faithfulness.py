"""studies/attribution_faithfulness.py on tiny untrained checkpoints of the reverse task: the
entries (AER of every method and attention map, deletion curves with their random baseline,
agreement, cost), the attention AER equal to `attnseq align`'s on the same pairs, the report
files, and exit status 2 on mistakes (the study's own numbers come from the commands in
docs/results/attribution.md, never from here)."""

import json
from pathlib import Path

import pytest
from helpers import load_script, untrained_checkpoint

from attnseq.alignment.forced import align_sentences
from attnseq.alignment.word_links import alignment_error_rate
from attnseq.data.generated import gold_alignments, make_splits
from attnseq.models.loading import load_trained_model

faithfulness_script = load_script("studies/attribution_faithfulness.py")

REVERSE = (
    "data.name=reverse",
    "data.tokenizer=word",
    "data.valid_size=4",
    "data.test_size=6",
    "data.min_len=3",
    "data.max_len=6",
    "model.dropout=0.0",
)
QUICK = ["--ig-steps", "2", "--smoothgrad-samples", "2", "--batch-size", "4"]


def run(tmp_path: Path, *arguments: str) -> dict:
    out = tmp_path / "report" / "attribution.json"
    assert faithfulness_script.main([*arguments, "--out", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_alignment_entry_of_an_rnn_matches_attnseq_align(tmp_path):
    checkpoint = untrained_checkpoint(tmp_path / "rnn.pt", *REVERSE)
    entries = run(
        tmp_path,
        "measure",
        str(checkpoint),
        "--name",
        "reverse/rnn",
        *QUICK,
        "--max-sentences",
        "5",
    )
    entry = entries["reverse/rnn"]
    methods = entry["alignment"]["methods"]
    assert set(methods) == {
        "attention",
        "shift-att",
        "gradient-x-input",
        "integrated-gradients",
        "smoothgrad",
    }
    assert "rollout" not in entry["seconds_per_sentence"]  # no rollout for an RNN
    assert entry["sentences"] == 5 and entry["family"] == "rnn"
    for scores in methods.values():
        assert 0.0 <= scores["aer"] <= 1.0
    # the attention row is the AER `attnseq align` reports on the same pairs
    trained = load_trained_model(checkpoint)
    cfg = trained.cfg.data
    sizes = {"train": cfg.train_size, "valid": cfg.valid_size, "test": cfg.test_size}
    lengths = {"min_len": cfg.min_len, "max_len": cfg.max_len, "vocab_size": cfg.vocab_size}
    pairs = make_splits("reverse", sizes, trained.cfg.seed, **lengths)["test"][:5]
    gold = gold_alignments("reverse", sizes, trained.cfg.seed, **lengths)["test"][:5]
    aligned = align_sentences(trained, [s for s, _ in pairs], [t for _, t in pairs])
    assert methods["attention"]["aer"] == pytest.approx(
        alignment_error_rate(aligned.links, gold)["aer"]
    )
    agreement = entry["agreement_with_attention"]["gradient-x-input"]
    assert agreement["rows"] == sum(len(t.split()) for _, t in pairs)
    assert all(seconds > 0 for seconds in entry["seconds_per_sentence"].values())


@pytest.mark.slow
def test_deletion_entry_of_a_transformer_and_the_report(tmp_path):
    checkpoint = untrained_checkpoint(
        tmp_path / "transformer.pt", *REVERSE, "model.family=transformer", "model.dec_layers=2"
    )
    methods = "attention,rollout,gradient-x-input"
    entries = run(
        tmp_path,
        "measure",
        str(checkpoint),
        "--name",
        "reverse/transformer",
        *QUICK,
        "--deletion",
        "--max-sentences",
        "4",
        "--ks",
        "0,1,2",
        "--random-seeds",
        "0,1",
        "--methods",
        methods,
    )
    entry = entries["reverse/transformer"]
    maps = entry["alignment"]["attention_maps"]
    assert set(maps) == {
        f"layer{layer}/{head}" for layer in (1, 2) for head in ("head1", "head2", "mean")
    }
    best = entry["alignment"]["methods"]["attention-best"]
    assert best["aer"] == min(scores["aer"] for scores in maps.values())
    assert entry["alignment"]["methods"]["attention"]["aer"] == maps["layer2/mean"]["aer"]
    curves = entry["deletion"]["curves"]
    assert {"attention", "rollout", "gradient-x-input", "random", "attention-best"} <= set(curves)
    for name in ("attention", "rollout", "gradient-x-input", "random"):
        assert curves[name]["ks"] == [0, 1, 2]
        assert abs(curves[name]["drops"][0]) < 1e-5  # k = 0 masks nothing
    assert len(curves["random"]["seed_areas"]) == 2
    assert set(curves["attention_layers"]) == {"layer1/mean", "layer2/mean"}
    folder = tmp_path / "report"
    table = (folder / "attribution_table.md").read_text()
    assert "| attention rollout |" in table and "reverse/transformer" in table
    assert "most faithful by deletion area" in (folder / "attribution_findings.md").read_text()
    assert (folder / "attribution.png").read_bytes()[:4] == b"\x89PNG"
    # the report alone, from the JSON
    (folder / "attribution_table.md").unlink()
    assert faithfulness_script.main(["report", "--out", str(folder / "attribution.json")]) == 0
    assert (folder / "attribution_table.md").read_text() == table


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--methods", "attention,lime"], "unknown method 'lime'"),
        (["--gold", "gold.txt"], "--gold needs --gold-src and --gold-tgt"),
        (["--ks", "1,2", "--deletion"], "--ks must start at 0"),
        (["--mask", "blank", "--deletion"], "--mask must be one of"),
    ],
)
def test_mistakes_exit_2(tmp_path, capsys, arguments, message):
    checkpoint = untrained_checkpoint(tmp_path / "rnn.pt", *REVERSE)
    out = str(tmp_path / "r.json")
    code = faithfulness_script.main(
        [
            "measure",
            str(checkpoint),
            "--name",
            "x",
            *QUICK,
            "--max-sentences",
            "2",
            "--methods",
            "attention",
            *arguments,
            "--out",
            out,
        ]
    )
    assert code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and message in error and len(error.splitlines()) == 1


def test_a_checkpoint_without_gold_needs_deletion_and_report_needs_entries(
    rnn_checkpoint, tmp_path, capsys
):
    checkpoint = str(rnn_checkpoint)  # the dates task: no gold links
    out = str(tmp_path / "r.json")
    assert faithfulness_script.main(["measure", checkpoint, "--name", "x", "--out", out]) == 2
    assert "no gold links" in capsys.readouterr().err
    assert faithfulness_script.main(["report", "--out", out]) == 2
    assert "run `measure` first" in capsys.readouterr().err


def test_run_metrics_come_from_the_training_run_of_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    metrics = {"test/exact_match": 0.5, "test/bleu": 40.25, "test/loss": 1.0}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    found = faithfulness_script.run_metrics(run_dir / "checkpoints" / "best.pt")
    assert found == {"test/exact_match": 0.5, "test/bleu": 40.25}
    assert faithfulness_script.run_metrics(tmp_path / "elsewhere.pt") == {}
