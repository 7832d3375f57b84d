"""`attnseq eval --gold GOLD --gold-src FILE --gold-tgt FILE`: AER, precision and recall
of a model's teacher-forced attention against gold word links, per layer and head, in
metrics.json; Pharaoh and NAACL gold files; clear errors for bad files."""

import json
from pathlib import Path

import pytest
import torch
from helpers import SRC, TGT, eval_result, run_eval, untrained_checkpoint, write_set

from attnseq.analysis.alignment import (
    alignment_error_rate,
    argmax_alignment,
    read_gold,
    word_attention,
    word_ids,
)
from attnseq.config.conversion import config_from_dict
from attnseq.data.file_readers import read_parallel
from attnseq.data.tokenizers import TokenizerPair
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models.loading import model_for


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    folder = tmp_path_factory.mktemp("align")
    files = write_set(folder / "data")
    checkpoint = untrained_checkpoint(
        folder / "run" / "checkpoints" / "best.pt",
        "model.family=transformer", "model.dec_layers=2", "model.heads=2",
        "data.source=local", "data.name=toy", "data.format=parallel", "data.tokenizer=word",
        f"data.root={folder / 'data'}", "data.splits.test=set", "data.src_lang=src",
        "data.tgt_lang=tgt",
        pairs=read_parallel(files["src"], files["tgt"]),
    )  # fmt: skip
    return checkpoint, files


def direct_scores(checkpoint: Path, files: dict[str, Path]) -> dict[str, float]:
    """The same numbers from alignment.py's functions, one sentence at a time."""
    payload = load_checkpoint(checkpoint)
    cfg = config_from_dict(payload["config"])
    tokenizers = TokenizerPair.from_state(payload["tokenizers"])
    model = model_for(cfg, tokenizers)
    model.load_state_dict(payload["model"])
    model.eval()
    sure, possible = read_gold(files["gold"])
    links: dict[str, list] = {}
    for src, tgt in zip(SRC, TGT, strict=True):
        src_ids, tgt_ids = tokenizers.src.encode(src), tokenizers.tgt.encode(tgt)
        with torch.no_grad():
            attention = model(
                torch.tensor([src_ids]),
                torch.tensor([len(src_ids)]),
                torch.tensor([[model.bos_id, *tgt_ids]]),
                need_weights=True,
            ).attention[0]  # (L, H, T, S)
        words = word_attention(
            attention,
            word_ids(tokenizers.src.pieces(src), "word"),
            word_ids(tokenizers.tgt.pieces(tgt), "word"),
        )  # (L, H, T_words, S_words)
        for layer in range(words.size(0)):
            for head in range(words.size(1)):
                key = f"layer{layer + 1}/head{head + 1}"
                links.setdefault(key, []).append(argmax_alignment(words[layer, head]))
            mean = f"layer{layer + 1}/mean"
            links.setdefault(mean, []).append(argmax_alignment(words[layer].mean(0)))
    scores = {}
    for key, hyp in links.items():
        for name, value in alignment_error_rate(hyp, sure, possible).items():
            if name in ("aer", "precision", "recall"):
                scores[f"align/{name}/{key}"] = value
                if key == "layer2/mean":
                    scores[f"align/{name}"] = value
    return scores


def test_metrics_json_holds_aer_precision_recall_per_head(setup, tmp_path) -> None:
    checkpoint, files = setup
    result = run_eval(
        checkpoint, tmp_path / "eval", "--gold", str(files["gold"]),
        "--gold-src", str(files["src"]), "--gold-tgt", str(files["tgt"]),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "layer 2, head mean" in result.output and "overall (layer 2 mean)" in result.output
    metrics = json.loads((eval_result(tmp_path / "eval") / "metrics.json").read_text())
    assert "test/bleu" in metrics  # the split's own metrics are still there
    align = {key: value for key, value in metrics.items() if key.startswith("align/")}
    expected = direct_scores(checkpoint, files)
    assert set(align) == set(expected)
    for name in ("aer", "precision", "recall"):
        assert f"align/{name}/layer1/head2" in align
        assert align[f"align/{name}"] == align[f"align/{name}/layer2/mean"]
    for key, value in expected.items():
        assert align[key] == pytest.approx(value, abs=1e-12), key
        assert 0.0 <= value <= 1.0


def test_naacl_and_reversed_gold_give_the_same_numbers(setup, tmp_path) -> None:
    checkpoint, files = setup
    sentences = ["--gold-src", str(files["src"]), "--gold-tgt", str(files["tgt"])]
    runs = {
        "pharaoh": ["--gold", str(files["gold"])],
        "naacl": ["--gold", str(files["naacl"])],  # detected from the content
        "naacl_named": ["--gold", str(files["naacl"]), "--gold-format", "naacl"],
        "reversed": ["--gold", str(files["reversed"]), "--gold-order", "tgt-src"],
    }
    results = {}
    for name, args in runs.items():
        result = run_eval(checkpoint, tmp_path / name, *args, *sentences)
        assert result.exit_code == 0, (name, result.output)
        metrics = json.loads((eval_result(tmp_path / name) / "metrics.json").read_text())
        results[name] = {k: v for k, v in metrics.items() if k.startswith("align/")}
    assert results["pharaoh"] == results["naacl"] == results["naacl_named"] == results["reversed"]


def test_eval_spells_the_gold_options_as_align_does_and_keeps_its_old_names_hidden(
    setup, tmp_path
) -> None:
    from typer.testing import CliRunner

    from attnseq.cli.app import app

    checkpoint, files = setup
    old = [
        "--alignments", str(files["gold"]), "--align-src", str(files["src"]),
        "--align-tgt", str(files["tgt"]), "--align-method", "shift-att",
    ]  # fmt: skip
    new = [
        "--gold", str(files["gold"]), "--gold-src", str(files["src"]),
        "--gold-tgt", str(files["tgt"]), "--method", "shift-att",
    ]  # fmt: skip
    results = {}
    for name, args in (("old", old), ("new", new)):
        result = run_eval(checkpoint, tmp_path / name, *args)
        assert result.exit_code == 0, (name, result.output)
        metrics = json.loads((eval_result(tmp_path / name) / "metrics.json").read_text())
        results[name] = {k: v for k, v in metrics.items() if k.startswith("align/")}
    assert results["old"] == results["new"] and results["new"]
    shown = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).output
    assert "--gold-src" in shown and "--method" in shown
    assert "--alignments" not in shown and "--align-src" not in shown


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gold": "missing.txt"}, "--gold file not found"),
        ({"gold_text": "0-0 1:1\n"}, "cannot parse link '1:1'"),
        ({"gold_text": "0-0\n1-1\n"}, "2 lines of Pharaoh links for 4 sentences"),
        (
            {"gold_text": "0-0\n\n\n9-0\n"},
            "line 4: link 9-0 (source word, target word) is outside sentence 4",
        ),
        ({"gold_text": "1 1 1 X\n"}, "expected 'sentence_no i j [S|P]"),
        ({"src": "missing.src"}, "--gold-src file not found"),
        ({"tgt_text": "le\n"}, "has 4 lines but --gold-tgt"),
        ({"drop": "--gold-tgt"}, "--gold needs --gold-tgt"),
        ({"format": "xml"}, "unknown gold format 'xml'"),
        ({"order": "left-right"}, "--gold-order must be one of src-tgt, tgt-src"),
        ({"method": "viterbi"}, "--method must be one of attention, shift-att"),
        ({"method": "shift-att", "drop_gold": True}, "--method goes with --gold"),
    ],
)
def test_bad_gold_sets_exit_2(setup, tmp_path, change, message) -> None:
    checkpoint, files = setup
    gold, src, tgt = files["gold"], files["src"], files["tgt"]
    if "gold" in change:
        gold = tmp_path / change["gold"]
    if "gold_text" in change:
        gold = tmp_path / "gold"
        gold.write_text(change["gold_text"], encoding="utf-8")
    if "src" in change:
        src = tmp_path / change["src"]
    if "tgt_text" in change:
        tgt = tmp_path / "tgt"
        tgt.write_text(change["tgt_text"], encoding="utf-8")
    args = {"--gold": str(gold), "--gold-src": str(src), "--gold-tgt": str(tgt)}
    if "format" in change:
        args["--gold-format"] = change["format"]
    if "order" in change:
        args["--gold-order"] = change["order"]
    if "method" in change:
        args["--method"] = change["method"]
    args.pop(change.get("drop", ""), None)
    if change.get("drop_gold"):
        args = {"--method": change["method"]}
    result = run_eval(checkpoint, tmp_path / "eval", *[x for kv in args.items() for x in kv])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not list((tmp_path / "eval").rglob("metrics.json"))


def test_empty_sentence_is_an_error(setup, tmp_path) -> None:
    checkpoint, files = setup
    tgt = tmp_path / "tgt"
    tgt.write_text("".join(line + "\n" for line in [TGT[0], "", *TGT[2:]]), encoding="utf-8")
    result = run_eval(
        checkpoint, tmp_path / "eval", "--gold", str(files["gold"]),
        "--gold-src", str(files["src"]), "--gold-tgt", str(tgt),
    )  # fmt: skip
    assert result.exit_code == 2 and "line 2 is empty" in result.output


def test_wpt03_trial_set_with_a_sentencepiece_model(shared_data, tmp_path, monkeypatch) -> None:
    """The shared WPT 2003 en-fr gold set: Pharaoh sure + possible files and the NAACL file
    give the same numbers for an en->fr model with sentencepiece pieces."""
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    folder = shared_data / "alignments" / "wpt03_enfr"
    checkpoint = untrained_checkpoint(
        tmp_path / "run" / "checkpoints" / "best.pt",
        "model.family=transformer", "model.dec_layers=2", "data.source=local",
        "data.name=wpt", "data.format=parallel", "data.tokenizer=sentencepiece",
        "data.spm_vocab_size=300", f"data.root={shared_data}",
        "data.splits.test=alignments/wpt03_enfr/trial", "data.src_lang=en",
        "data.tgt_lang=fr", "trainer.max_output_extra=2", "trainer.max_output_ratio=0.2",
        pairs=read_parallel(folder / "trial.en", folder / "trial.fr"),
    )  # fmt: skip
    sentences = ["--gold-src", str(folder / "trial.en"), "--gold-tgt", str(folder / "trial.fr")]
    pharaoh = ["--gold", str(folder / "trial.sure.pharaoh")]
    pharaoh += ["--gold-possible", str(folder / "trial.possible.pharaoh")]
    naacl = ["--gold", str(folder / "trial.wa.nonullalign")]
    results = []
    for name, args in (("pharaoh", pharaoh), ("naacl", naacl)):
        result = run_eval(checkpoint, tmp_path / name, *args, *sentences)
        assert result.exit_code == 0, result.output
        metrics = json.loads((eval_result(tmp_path / name) / "metrics.json").read_text())
        results.append({k: v for k, v in metrics.items() if k.startswith("align/")})
    assert results[0] == results[1]
    assert {"align/aer", "align/precision", "align/recall", "align/aer/layer2/head2"} <= set(
        results[0]
    )
    assert all(0.0 <= value <= 1.0 for value in results[0].values())
    # an fr->en reading of the same gold (English first) needs --gold-order tgt-src
    swapped = ["--gold-src", str(folder / "trial.fr"), "--gold-tgt", str(folder / "trial.en")]
    result = run_eval(checkpoint, tmp_path / "swapped", *naacl, *swapped)
    assert result.exit_code == 2 and "--gold-order src-tgt" in result.output
