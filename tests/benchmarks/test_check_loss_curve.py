"""benchmarks/check_loss_curve.py: the fast training path and the step-by-step reference path
train to the same validation losses when there is no dropout noise."""

import json

import pytest
from helpers import TINY_SIZES, load_script

TINY = ["data.train_size=200", "data.valid_size=30", "model.dropout=0"]
# each family's tiny sizes (a run refuses the keys of the other family), an RNN encoder of 16
SIZES = {**TINY_SIZES, "rnn": [*TINY_SIZES["rnn"], "model.enc_hidden=16"]}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["rnn_bahdanau", "rnn_luong", "transformer"])
def test_fast_and_reference_paths_train_alike_without_dropout(tmp_path, model):
    out = tmp_path / "curve.json"
    sizes = SIZES["transformer" if model == "transformer" else "rnn"]
    status = load_script("benchmarks/check_loss_curve.py").main(
        ["--steps", "6", "--every", "3", "--threads", "1", "--out", str(out), f"model={model}"]
        + TINY
        + sizes
    )
    assert status == 0
    report = json.loads(out.read_text())
    fast = [point["valid_loss"] for point in report["curves"]["fast"]]
    assert fast[-1] < fast[0]  # it trained
    assert report["max_gap_fast_vs_reference"] < 1e-3
    assert report["max_gap_fast_vs_other_dropout"] < 1e-6  # no dropout: nothing to vary


def test_copy_models_are_refused():
    assert load_script("benchmarks/check_loss_curve.py").main(["model.copy=true"]) == 2
