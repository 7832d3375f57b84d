"""scripts/check_loss_curve.py: the fast training path and the step-by-step reference path
train to the same validation losses when there is no dropout noise."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_loss_curve.py"
TINY = [
    "data.train_size=200",
    "data.valid_size=30",
    "model.emb_dim=16",
    "model.hidden=32",
    "model.enc_hidden=16",
    "model.d_model=32",
    "model.heads=2",
    "model.enc_layers=1",
    "model.dec_layers=1",
    "model.ff_dim=64",
    "model.dropout=0",
]


def _script():
    spec = importlib.util.spec_from_file_location("check_loss_curve", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", ["rnn_bahdanau", "rnn_luong", "transformer"])
def test_fast_and_reference_paths_train_alike_without_dropout(tmp_path, model):
    out = tmp_path / "curve.json"
    status = _script().main(
        ["--steps", "6", "--every", "3", "--threads", "1", "--out", str(out), f"model={model}"]
        + TINY
    )
    assert status == 0
    report = json.loads(out.read_text())
    fast = [point["valid_loss"] for point in report["curves"]["fast"]]
    assert fast[-1] < fast[0]  # it trained
    assert report["max_gap_fast_vs_reference"] < 1e-3
    assert report["max_gap_fast_vs_other_dropout"] < 1e-6  # no dropout: nothing to vary


def test_copy_models_are_refused():
    assert _script().main(["model.copy=true"]) == 2
