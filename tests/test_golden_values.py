"""Golden values: the training loss after each of a few fixed-seed updates and the greedy output
for three fixed sources, for each model family on the generated reverse task. They hold the
numerics of training and decoding fixed while code moves around them.

The values live in tests/golden/reverse.json. After a change that is meant to alter the numerics,
regenerate them with `ATTNSEQ_UPDATE_GOLDEN=1 pytest tests/test_golden_values.py` and say why in
the commit."""

import json
import os
from pathlib import Path

import pytest
from helpers import tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.training.run import run_training

GOLDEN = Path(__file__).parent / "golden" / "reverse.json"
UPDATE = os.environ.get("ATTNSEQ_UPDATE_GOLDEN") == "1"
STEPS = 10
SOURCES = ["g p l l n", "q m n m", "o k m p"]

REVERSE = [
    "data.name=reverse",
    "data.source=generated",
    "data.task=translation",
    "data.tokenizer=word",
    "data.train_size=200",
    "data.valid_size=8",
    "data.test_size=8",
    "data.min_len=3",
    "data.max_len=8",
    "data.vocab_size=20",
    "data.max_tokens=200",
    "model.dropout=0.0",
    "model.attention_dropout=0.0",
    f"trainer.max_steps={STEPS}",
    f"trainer.validate_every={STEPS}",
    "trainer.log_every=1",
    "trainer.num_heatmaps=1",
    "trainer.threads=1",
    "seed=7",
]
RNN = ["model.family=rnn", "model.emb_dim=16", "model.hidden=32", "model.rnn.layers=1"]
TRANSFORMER = [
    "model.family=transformer",
    "model.d_model=32",
    "model.heads=2",
    "model.enc_layers=2",
    "model.dec_layers=2",
    "model.ff_dim=64",
    "optim.warmup_steps=2",
    "optim.lr=0.005",
]
VARIANTS = {
    "rnn_gru_bahdanau": RNN
    + ["model.decoder=bahdanau", "model.rnn.cell=gru", "model.attention.score=additive"],
    "rnn_lstm_luong_general": RNN
    + [
        "model.decoder=luong",
        "model.rnn.cell=lstm",
        "model.attention.score=general",
        "model.input_feeding=true",
    ],
    "transformer": TRANSFORMER,
    "rnn_pointer_generator": RNN
    + ["model.decoder=bahdanau", "model.attention.score=additive", "model.copy=true"],
    "transformer_pointer_generator": TRANSFORMER + ["model.copy=true"],
}


def train_losses(run_dir: Path) -> list[float]:
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    return [event.value for event in sorted(events.Scalars("train/loss"), key=lambda e: e.step)]


def greedy_outputs(checkpoint: Path, tmp_path: Path) -> list[str]:
    sources = tmp_path / "sources.txt"
    sources.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    out = tmp_path / "greedy.txt"
    result = CliRunner().invoke(
        app,
        [
            "translate",
            str(checkpoint),
            "--beam",
            "1",
            "--device",
            "cpu",
            "-i",
            str(sources),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8").splitlines()


def measure(variant: str, tmp_path: Path) -> dict:
    run_dir = tmp_path / "run"
    run_training(tiny_config(*REVERSE, *VARIANTS[variant]), run_dir)
    return {
        "train_loss": train_losses(run_dir),
        "greedy": greedy_outputs(run_dir / "checkpoints" / "last.pt", tmp_path),
    }


def stored() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.is_file() else {}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_golden_values_hold(variant: str, tmp_path: Path) -> None:
    measured = measure(variant, tmp_path)
    assert len(measured["train_loss"]) == STEPS
    assert len(measured["greedy"]) == len(SOURCES)
    if UPDATE:
        values = stored()
        values[variant] = measured
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    golden = stored()
    assert variant in golden, f"no golden values for {variant}: run with ATTNSEQ_UPDATE_GOLDEN=1"
    expected = golden[variant]
    assert measured["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-5, abs=1e-6)
    assert measured["greedy"] == expected["greedy"]
    # the updates do something: the loss moves away from its starting value
    assert measured["train_loss"][-1] != pytest.approx(measured["train_loss"][0], rel=1e-3)
