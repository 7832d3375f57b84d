"""studies/prune_heads_curve.py on a tiny untrained transformer and a 6-sentence test split: the
rows, the table and the figure, the unpruned point against `attnseq eval`, compacted models
decoding what the masked ones decode, and exit status 2 on mistakes (the Multi30k figures are
measured by the command in docs/guides/heads.md, never here)."""

import json

import pytest
from helpers import load_script, untrained_checkpoint

from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint

pytestmark = pytest.mark.slow  # a pruning curve over trained heads

prune_heads_curve = load_script("studies/prune_heads_curve.py")
TINY = (
    "model.family=transformer",
    "model.enc_layers=2",
    "model.dec_layers=1",
    "model.heads=4",
    "data.valid_size=12",
    "data.test_size=6",
)


def test_curve_rows_table_and_figure(tmp_path):
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TINY)
    out = tmp_path / "curve"
    arguments = [
        str(checkpoint),
        "--out",
        str(out),
        "--fractions",
        "0,0.25,0.5",
        "--random-seeds",
        "0,1",
        "--device",
        "cpu",
    ]
    assert prune_heads_curve.main(arguments) == 0
    report = json.loads((out / "curve.json").read_text())
    rows = report["rows"]
    assert report["sentences"] == 6
    assert len(rows) == 3 * 4  # fractions x (gradient, ablation, random 0, random 1)
    # 16 heads (2 + 1 + 1 layers x 4): 25 % = 4, 50 % = 8
    assert {(row["fraction"], row["pruned"]) for row in rows} == {(0, 0), (0.25, 4), (0.5, 8)}
    for row in rows:
        assert row["compact_same_outputs"] == 1.0  # the compacted model decodes the same
        assert row["ms_per_sentence"] > 0 and row["compact_ms_per_sentence"] > 0
    unpruned = [row for row in rows if row["fraction"] == 0]
    assert len({(row["bleu"], row["loss"]) for row in unpruned}) == 1
    assert len({row["loss"] for row in rows if row["fraction"] == 0.5}) > 1  # rankings differ
    metrics = evaluate_checkpoint(checkpoint, "test", out_dir=tmp_path / "eval", device_name="cpu")
    assert unpruned[0]["loss"] == pytest.approx(metrics["test/loss"], rel=1e-6)
    assert unpruned[0]["bleu"] == pytest.approx(metrics["test/bleu"])
    assert "| 50% | 8/16 |" in (out / "curve.md").read_text()
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"
    importance = json.loads((out / "importance.json").read_text())
    assert len(importance["gradient"]["encoder_self"]) == 2


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--fractions", "0,1.2"], "must lie in [0, 1)"),
        (["--fractions", "0.9"], "at most 12 of 16 heads"),
    ],
)
def test_bad_fractions_exit_2(tmp_path, capsys, arguments, message):
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *TINY)
    code = prune_heads_curve.main([str(checkpoint), "--out", str(tmp_path / "o"), *arguments])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_rnn_checkpoint_exits_2(rnn_checkpoint, tmp_path, capsys):
    code = prune_heads_curve.main([str(rnn_checkpoint), "--out", str(tmp_path / "o")])
    assert code == 2 and "heads needs a transformer" in capsys.readouterr().err
