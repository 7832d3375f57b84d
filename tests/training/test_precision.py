"""trainer.precision / compile / num_workers: reduced precision trains on the CPU too, an fp16
overflow lowers the loss scale instead of counting as divergence, the scaler state is resumed,
and bad values are config errors. GPU runs of the same paths are in tests/gpu/."""

import math
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.precision import MixedPrecision
from attnseq.training.run import run_training


@pytest.mark.parametrize(
    ("family", "precision"),
    [
        ("rnn", "bf16"),
        ("rnn", "fp16"),
        ("transformer", "fp16"),  # every kind: test_precision_matrix.py, by train_step
        pytest.param("transformer", "bf16", marks=pytest.mark.slow),
    ],
)
def test_reduced_precision_trains_on_the_cpu(tmp_path: Path, family: str, precision: str) -> None:
    cfg = tiny_config(f"model.family={family}", f"trainer.precision={precision}")
    metrics = run_training(cfg, tmp_path)
    assert math.isfinite(metrics["test/loss"])
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 6
    # weights and optimizer state stay float32 ("master weights")
    assert all(t.dtype == torch.float32 for t in last["model"].values() if t.is_floating_point())
    scaler = last["grad_scaler"]
    assert (scaler != {}) == (precision == "fp16")  # only fp16 scales the loss


@pytest.mark.slow
def test_fp16_overflow_skips_the_update_and_halves_the_scale(tmp_path: Path, monkeypatch) -> None:
    """An infinite gradient under fp16 is the loss scale's business: the step is skipped, the
    scale halves, training goes on, and it does not count towards max_nonfinite_steps."""
    from attnseq.training import trainer

    real_backward = MixedPrecision.backward
    calls = [0]

    def backward(self, loss):
        calls[0] += 1
        real_backward(self, loss)
        if calls[0] in (2, 3, 4):  # three overflows in a row: more than max_nonfinite_steps
            for parameter in trainer.Trainer.current_model.parameters():
                if parameter.grad is not None:
                    parameter.grad.fill_(float("inf"))
                    break

    original_init = trainer.Trainer.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        trainer.Trainer.current_model = self.model

    monkeypatch.setattr(MixedPrecision, "backward", backward)
    monkeypatch.setattr(trainer.Trainer, "__init__", init)
    cfg = tiny_config("trainer.precision=fp16", "trainer.max_nonfinite_steps=2")
    run_training(cfg, tmp_path)
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    progress = last["progress"]
    assert progress["overflow_steps"] == 3
    assert progress["skipped_steps"] == 0  # overflows are not divergence
    assert progress["step"] == 6  # updates that happened; the 3 overflowed batches are not
    assert last["grad_scaler"]["scale"] == pytest.approx(2.0**16 / 2**3)


@pytest.mark.slow
def test_resume_restores_the_loss_scale(tmp_path: Path) -> None:
    first = tiny_config("trainer.precision=fp16", "trainer.max_steps=3")
    run_training(first, tmp_path)
    saved = load_checkpoint(tmp_path / "checkpoints" / "last.pt")["grad_scaler"]
    resumed = tiny_config("trainer.precision=fp16", "trainer.max_steps=6", "resume=auto")
    from attnseq.training import trainer

    seen = {}
    original = trainer.Trainer.restore

    def restore(self, payload):
        original(self, payload)
        seen.update(self.precision.state_dict())

    trainer.Trainer.restore = restore
    try:
        run_training(resumed, tmp_path)
    finally:
        trainer.Trainer.restore = original
    assert seen["scale"] == saved["scale"] and seen["_growth_tracker"] == saved["_growth_tracker"]


def test_bad_precision_is_a_config_error() -> None:
    with pytest.raises(UserError, match="precision"):
        tiny_config("trainer.precision=16")
    with pytest.raises(UserError, match="num_workers"):
        tiny_config("trainer.num_workers=-1")


@pytest.mark.slow
def test_workers_train_the_same_weights_as_the_training_process(tmp_path: Path) -> None:
    inline = run_training(tiny_config(), tmp_path / "inline")
    workers = run_training(tiny_config("trainer.num_workers=2"), tmp_path / "workers")
    a = load_checkpoint(tmp_path / "inline" / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "workers" / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert inline == pytest.approx(workers)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_compiled_training_matches_eager_on_the_cpu(tmp_path: Path, family: str) -> None:
    """torch.compile (inductor's C++ kernels on the CPU) computes the same losses as eager."""
    overrides = [f"model.family={family}", "model.dropout=0.0", "trainer.max_steps=3"]
    eager = run_training(tiny_config(*overrides), tmp_path / "eager")
    compiled = run_training(tiny_config(*overrides, "trainer.compile=true"), tmp_path / "compiled")
    assert compiled["test/loss"] == pytest.approx(eager["test/loss"], rel=1e-4)
