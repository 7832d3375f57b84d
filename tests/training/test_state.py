"""Where training is (attnseq/training/state.py): a checkpoint's progress without newer counters
keeps their defaults, the last batch of an epoch begins the next one, and the random number
generators' states survive a checkpoint and a validation."""

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from attnseq.training.state import TrainingState, preserved_rng, rng_state, set_rng_state


@pytest.fixture
def rng_kept() -> Iterator[None]:
    """The test's draws leave the process's generators as they were."""
    python = random.getstate()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(python)


def draws() -> tuple[list[float], float]:
    return torch.rand(3).tolist(), random.random()


def test_progress_without_newer_counters_keeps_their_defaults() -> None:
    state = TrainingState.from_dict({"step": 5, "epoch": 1, "a_counter_of_another_version": 2})
    assert state == TrainingState(step=5, epoch=1)


def test_the_last_batch_of_an_epoch_begins_the_next() -> None:
    state = TrainingState()
    state.end_batch(2)
    assert (state.epoch, state.batch_in_epoch) == (0, 1)
    state.end_batch(2)
    assert (state.epoch, state.batch_in_epoch) == (1, 0)


def test_the_generators_continue_from_a_weights_only_checkpoint(rng_kept, tmp_path: Path) -> None:
    torch.save({"rng": rng_state()}, tmp_path / "state.pt")
    expected = draws()
    set_rng_state(torch.load(tmp_path / "state.pt", weights_only=True)["rng"])
    assert draws() == expected


def test_what_a_validation_draws_does_not_move_the_training_stream(rng_kept) -> None:
    state = rng_state()
    expected = draws()
    set_rng_state(state)
    with preserved_rng():
        draws()
    assert draws() == expected
