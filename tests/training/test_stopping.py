"""When training stops (attnseq/training/stopping.py): the stopping policy's reasons, a metric at
its ceiling, non-finite updates in a row; SIGINT finishes the step and writes last.pt, a second
one stops at once, and in `attnseq.train` it is a KeyboardInterrupt carrying the call that
resumes the run."""

import os
import signal
import time
from itertools import count
from pathlib import Path

import pytest
from helpers import TINY, checkpoint_step, tiny_config

import attnseq
from attnseq.config.choices import Metric
from attnseq.config.schema import TrainerConfig
from attnseq.models import objective as loss_module
from attnseq.training.run import run_training
from attnseq.training.state import TrainingState
from attnseq.training.stopping import StoppingPolicy, StopSignals, TrainingInterrupted


def test_stopping_policy_reasons() -> None:
    trainer = TrainerConfig(
        max_steps=10, max_epochs=3, early_stopping_metric=Metric.loss, early_stopping_patience=2
    )
    policy = StoppingPolicy(trainer)
    state = TrainingState()
    assert policy.reason(state) is None
    assert policy.record_validation(state, 2.0) and state.best_metric == 2.0
    assert not policy.record_validation(state, 2.5)
    assert policy.reason(state) is None
    assert not policy.record_validation(state, 2.0)  # equal is not better
    assert policy.reason(state) == "early stopping"
    assert policy.reason(TrainingState(step=10)) == "max_steps reached"
    assert policy.reason(TrainingState(epoch=3)) == "max_epochs reached"


def test_a_metric_at_its_ceiling_stops_training() -> None:
    trainer = TrainerConfig(early_stopping_metric=Metric.exact_match, early_stopping_patience=0)
    policy = StoppingPolicy(trainer)
    state = TrainingState()
    policy.record_validation(state, 1.0)
    assert "best possible" in policy.reason(state)


def test_nonfinite_updates_in_a_row_diverge() -> None:
    policy = StoppingPolicy(TrainerConfig(max_nonfinite_steps=3))
    state = TrainingState()
    assert [policy.record_skip(state) for _ in range(3)] == [False, False, True]
    assert state.skipped_steps == 3


def test_sigint_finishes_the_step_and_writes_last_pt(tmp_path: Path, monkeypatch) -> None:
    """In-process: the signal arrives inside step 5's loss; the run saves step 5 and stops."""
    real_loss = loss_module.token_loss_sum
    calls = count(1)

    def loss_with_a_signal(*args, **kwargs):
        if next(calls) == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(loss_module, "token_loss_sum", loss_with_a_signal)
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as caught:
        run_training(tiny_config("trainer.max_steps=20"), tmp_path)
    assert signal.getsignal(signal.SIGINT) is previous  # handlers are restored
    assert caught.value.graceful and caught.value.step == 5
    assert caught.value.exit_status == 130
    assert checkpoint_step(tmp_path / "checkpoints" / "last.pt") == 5


def test_a_second_sigint_stops_at_once() -> None:
    with StopSignals() as stop, stop.graceful():
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(TrainingInterrupted) as caught:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode boundary
    assert not caught.value.graceful
    with StopSignals(), pytest.raises(TrainingInterrupted) as caught:  # outside the loop
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert caught.value.exit_status == 143


@pytest.mark.slow
def test_sigint_in_attnseq_train_is_a_keyboard_interrupt_with_the_call_that_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, as above, through the Python API; then the call it names resumes the run."""
    real_loss = loss_module.token_loss_sum
    calls = count(1)

    def loss_with_a_signal(*args, **kwargs):
        if next(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(loss_module, "token_loss_sum", loss_with_a_signal)
    overrides = [*TINY, "trainer.max_steps=6", "trainer.validate_every=4", "trainer.progress=false"]
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt) as caught:
        try:
            attnseq.train(overrides, run_dir=run, verbose=False)
        except Exception:  # what a notebook's `except Exception` catches: not a Ctrl-C
            pytest.fail("the interruption was caught as an Exception")
    interruption = caught.value
    assert isinstance(interruption, TrainingInterrupted) and interruption.step == 3
    call = (
        f"attnseq.train({[*overrides, 'resume=auto']!r}, run_dir={str(run.absolute())!r}, "
        "verbose=False)"
    )
    assert interruption.resume == call
    assert str(interruption).endswith(f"Resume with:\n  {call}")
    assert f"{run.absolute() / 'checkpoints' / 'last.pt'} (step 3) is saved" in str(interruption)
    assert "hydra" not in str(interruption) and "attnseq train" not in str(interruption)
    monkeypatch.setattr(loss_module, "token_loss_sum", real_loss)
    resumed = eval(interruption.resume, {"attnseq": attnseq})  # the call, as the user copies it
    assert resumed.run_dir == run.absolute() and "test/exact_match" in resumed.metrics
    assert "resuming from" in (run / "train.log").read_text()
    assert checkpoint_step(run / "checkpoints" / "last.pt") == 6
