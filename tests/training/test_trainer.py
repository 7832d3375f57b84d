"""The training loop (attnseq/training/trainer.py), checked where a CPU can check it: running out
of device memory is one line with the batch that failed while last.pt stays, and the updates'
numbers can be read from the device in batches (as on a GPU) without changing anything but how
often the host waits."""

import math
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.models import objective
from attnseq.training import trainer as trainer_module
from attnseq.training.run import run_training
from attnseq.training.train_step import StepOutcome


def test_out_of_memory_is_one_line_and_last_pt_stays(tmp_path: Path, monkeypatch) -> None:
    real_step = trainer_module.train_step
    calls = []

    def step(parts, micro_batches, number):
        calls.append(number)
        if len(calls) == 4:  # after the validation at step 3 wrote last.pt
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(parts, micro_batches, number)

    monkeypatch.setattr(trainer_module, "train_step", step)
    with pytest.raises(UserError) as refusal:
        run_training(tiny_config("data.max_tokens=200"), tmp_path)
    message = str(refusal.value)
    assert message.startswith("out of cpu memory in update 4, on a batch of ")
    assert "under data.max_tokens=200: lower data.max_tokens" in message
    assert message.endswith("last.pt (step 3) is kept") and "\n" not in message
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["progress"]["step"] == 3


REAL_TRAINER_INIT, REAL_READ_ALL = trainer_module.Trainer.__init__, StepOutcome.read_all


def progress(run: dict) -> dict:
    """The checkpoint's counters, but the wall-clock time."""
    return {k: v for k, v in run["last"]["progress"].items() if k != "train_seconds"}


def train_reading_every(tmp_path: Path, monkeypatch, every: int, *overrides: str) -> dict:
    """A tiny run whose trainer reads its updates' numbers every `every` updates (as on a
    GPU, where reading waits for the device), with the number of reads it made."""
    reads = []
    original_init, original_read = REAL_TRAINER_INIT, REAL_READ_ALL

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.read_every = every

    def read_all(outcomes):
        reads.append(len([o for o in outcomes if o._values is None]))
        original_read(outcomes)

    monkeypatch.setattr(trainer_module.Trainer, "__init__", init)
    monkeypatch.setattr(StepOutcome, "read_all", staticmethod(read_all))
    cfg = tiny_config(
        "trainer.max_steps=12", "trainer.log_every=6", "trainer.validate_every=12", *overrides
    )
    run_training(cfg, tmp_path)
    return {"last": load_checkpoint(tmp_path / "checkpoints" / "last.pt"), "reads": reads}


@pytest.mark.slow
def test_when_the_numbers_are_read_changes_nothing_but_the_waits(tmp_path: Path, monkeypatch):
    """Read at once (the CPU's default) and read with the log lines (a GPU's default): the same
    weights bit for bit, the same counters, and 12 updates read in 2 waits instead of 12."""
    at_once = train_reading_every(tmp_path / "a", monkeypatch, 1)
    batched = train_reading_every(tmp_path / "b", monkeypatch, 6)
    assert [n for n in at_once["reads"] if n] == [1] * 12
    assert [n for n in batched["reads"] if n] == [6, 6]
    assert progress(at_once) == progress(batched)
    for name, tensor in at_once["last"]["model"].items():
        assert torch.equal(tensor, batched["last"]["model"][name]), name


@pytest.mark.slow
def test_skips_read_late_are_counted_as_when_read_at_once(tmp_path: Path, monkeypatch):
    real_loss, calls = objective.token_loss_sum, [0]

    def loss(*args, **kwargs):
        calls[0] += 1
        value = real_loss(*args, **kwargs)
        return value * math.nan if calls[0] in (2, 3, 8) else value

    monkeypatch.setattr(objective, "token_loss_sum", loss)
    runs = []
    for every in (1, 6):
        calls[0] = 0
        runs.append(train_reading_every(tmp_path / str(every), monkeypatch, every))
    assert progress(runs[0]) == progress(runs[1])
    assert progress(runs[0])["skipped_steps"] == 3
    for name, tensor in runs[0]["last"]["model"].items():
        assert torch.equal(tensor, runs[1]["last"]["model"][name]), name
