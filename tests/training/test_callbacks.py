"""Callbacks (attnseq/training/callbacks.py): what they hear, how they end a run early, and
that they leave the run as they found it."""

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import tiny_config

from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.callbacks import Callback, Callbacks, TrainingEvent, check_callbacks
from attnseq.training.run import run_training

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


class Recorder:
    """A callback that is no `Callback` subclass: any object with the methods works."""

    def __init__(self) -> None:
        self.updates: list[TrainingEvent] = []
        self.validations: list[TrainingEvent] = []
        self.ends: list[TrainingEvent] = []

    def on_update(self, event: TrainingEvent) -> None:
        self.updates.append(event)

    def on_validation(self, event: TrainingEvent) -> None:
        self.validations.append(event)

    def on_end(self, event: TrainingEvent) -> None:
        self.ends.append(event)


def checkpoint_step(path: Path) -> int:
    return int(load_checkpoint(path)["progress"]["step"])


@pytest.mark.slow
def test_callbacks_hear_every_update_each_validation_and_the_end(tmp_path: Path) -> None:
    heard = Recorder()
    cfg = tiny_config("trainer.max_steps=6", "trainer.validate_every=3")
    results = run_training(cfg, tmp_path, callbacks=[heard], progress=False, summary=False)
    assert [event.step for event in heard.updates] == [1, 2, 3, 4, 5, 6]
    epochs = [event.epoch for event in heard.updates]
    assert epochs == sorted(epochs) and 0 < epochs[0] < epochs[-1]
    losses = [event.metrics["train/loss"] for event in heard.updates]
    assert all(math.isfinite(loss) and loss > 0 for loss in losses)
    assert all(event.metrics["train/grad_norm"] > 0 for event in heard.updates)
    assert [event.step for event in heard.validations] == [3, 6]
    best = max(event.metrics["valid/exact_match"] for event in heard.validations)
    assert results["valid/best_exact_match"] == best
    assert {"valid/loss", "valid/bleu"} <= set(heard.validations[0].metrics)
    (end,) = heard.ends
    assert end.step == 6 and end.reason == "max_steps reached"
    assert end.metrics == json.loads((tmp_path / "metrics.json").read_text()) == results
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")["model"]  # what was tested
    assert all(torch.equal(w, best[name]) for name, w in end.model.state_dict().items())


class StopOnUpdate(Callback):
    def on_update(self, event: TrainingEvent) -> bool:
        return event.step == 4


class StopOnValidation(Callback):
    def on_validation(self, event: TrainingEvent) -> None:
        event.stop = event.metrics["valid/loss"] > 0  # at the first validation, step 3


@pytest.mark.slow
@pytest.mark.parametrize(("stopper", "last_step"), [(StopOnUpdate, 4), (StopOnValidation, 3)])
def test_a_callback_ends_the_run_as_an_early_stop(
    stopper: type[Callback], last_step: int, tmp_path: Path
) -> None:
    heard = Recorder()
    cfg = tiny_config("trainer.max_steps=20", "trainer.validate_every=3")
    results = run_training(
        cfg, tmp_path, callbacks=[stopper(), heard], progress=False, summary=False
    )
    assert heard.updates[-1].step == last_step < 20
    # the final state is validated and written, the best checkpoint tested, as any stop
    assert heard.validations[-1].step == last_step
    assert checkpoint_step(tmp_path / "checkpoints" / "last.pt") == last_step
    assert (tmp_path / "checkpoints" / "best.pt").is_file()
    assert json.loads((tmp_path / "metrics.json").read_text()) == results
    (end,) = heard.ends
    hook = "on_update" if stopper is StopOnUpdate else "on_validation"
    assert end.reason == f"{stopper.__name__}.{hook} asked to stop"
    assert end.step == last_step


class Meddler(Callback):
    """Draws random numbers and leaves the model in eval mode at every update."""

    def on_update(self, event: TrainingEvent) -> None:
        torch.rand(100)
        random.random()
        event.model.eval()


@pytest.mark.slow
def test_callbacks_leave_dropout_and_the_random_stream_as_they_were(tmp_path: Path) -> None:
    cfg = tiny_config("trainer.max_steps=4", "trainer.validate_every=4", "model.dropout=0.3")
    run_training(cfg, tmp_path / "plain", progress=False, summary=False)
    run_training(cfg, tmp_path / "meddled", callbacks=[Meddler()], progress=False, summary=False)
    plain = load_checkpoint(tmp_path / "plain" / "checkpoints" / "last.pt")["model"]
    meddled = load_checkpoint(tmp_path / "meddled" / "checkpoints" / "last.pt")["model"]
    assert plain.keys() == meddled.keys()
    for name, weights in plain.items():
        assert torch.equal(weights, meddled[name]), name


def test_only_the_hooks_a_callback_defines_count() -> None:
    class OnlyValidation(Callback):
        def on_validation(self, event: TrainingEvent) -> None:
            pass

    assert not Callbacks([OnlyValidation()]).wants("on_update")  # Callback's no-op
    assert Callbacks([OnlyValidation()]).wants("on_validation")
    assert Callbacks([Recorder()]).wants("on_update")
    assert not Callbacks([]).wants("on_update")


def test_a_stop_returned_from_on_end_or_after_the_first_is_not_a_new_reason() -> None:
    model = torch.nn.Linear(1, 1)
    callbacks = Callbacks([StopOnUpdate()])
    callbacks.update(3, 1.0, {"train/loss": 1.0}, model)
    assert callbacks.stop_reason is None
    callbacks.update(4, 1.0, {"train/loss": 1.0}, model)
    assert callbacks.stop_reason == "StopOnUpdate.on_update asked to stop"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (StopOnUpdate(), "callbacks must be a list of callbacks"),
        ("on_update", "callbacks must be a list of callbacks"),
        ([StopOnUpdate], r"callbacks\[0\] is the class StopOnUpdate: pass an instance"),
        ([Recorder(), object()], r"callbacks\[1\] \(object\) has none of the methods"),
    ],
)
def test_callbacks_that_are_none_are_type_errors(value: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        check_callbacks(value)


def test_a_list_of_callbacks_passes() -> None:
    recorder = Recorder()
    assert check_callbacks((recorder,)) == [recorder]
    assert check_callbacks([]) == []


class Answers(Callback):
    """A callback whose on_update returns `answer`."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def on_update(self, event: TrainingEvent) -> object:
        return self.answer


@pytest.mark.parametrize("answer", ["yes", 1, 0.0, [], torch.tensor(True)])
def test_a_callback_that_returns_what_is_no_answer_is_a_type_error(answer: object) -> None:
    """True stops, False and None go on; anything else would be ignored without a word, or
    taken for one of them by its truth: one TypeError naming the method and the value."""
    callbacks = Callbacks([Answers(answer)])
    with pytest.raises(TypeError, match=r"^Answers.on_update returned .* \(\w+\): return True"):
        callbacks.update(1, 0.1, {"train/loss": 1.0}, torch.nn.Linear(1, 1))


def test_a_numpy_truth_value_is_an_answer() -> None:
    import numpy as np

    for answer, stops in ((np.bool_(True), True), (np.bool_(False), False), (False, False)):
        callbacks = Callbacks([Answers(answer)])
        callbacks.update(1, 0.1, {"train/loss": 1.0}, torch.nn.Linear(1, 1))
        assert (callbacks.stop_reason is not None) is stops


class Poisoner(Callback):
    """Sets every weight to NaN after update 2."""

    def on_update(self, event: TrainingEvent) -> None:
        if event.step == 2:
            with torch.no_grad():
                for parameter in event.model.parameters():
                    parameter.fill_(float("nan"))


@pytest.mark.slow
def test_weights_a_callback_made_non_finite_end_the_run_saying_so(tmp_path: Path) -> None:
    """No update of this session wrote a checkpoint yet: the message says what the folder
    holds (not "last.pt is from step None") and that something besides an update may have
    changed the weights."""
    from attnseq.training.stopping import TrainingDiverged

    cfg = tiny_config("trainer.max_steps=6", "trainer.validate_every=3")
    with pytest.raises(TrainingDiverged) as raised:
        run_training(cfg, tmp_path, callbacks=[Poisoner()], progress=False, summary=False)
    message = str(raised.value)
    assert "None" not in message, message
    assert "the weights became non-finite after step 3" in message
    assert "a callback that changes the model's weights" in message
    assert f"no checkpoint of this session was written; {tmp_path / 'checkpoints'}" in message
