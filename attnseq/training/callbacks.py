"""Callbacks: Python code that watches a training run from inside it (`on_update`,
`on_validation`, `on_end`) and may end it early (docs/internals/training.md)."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnseq.training.state import preserved_rng

HOOKS = ("on_update", "on_validation", "on_end")


@dataclass
class TrainingEvent:
    """What a callback method receives.

    Attributes:
        step: the update just done (on_update), the step validated (on_validation), the last
            step (on_end).
        epoch: epochs done, with the share of the current one (1.5: halfway through the second).
        metrics: name -> value: "train/loss", "train/grad_norm" (on_update); "valid/NAME"
            (on_validation); the test metrics of the best checkpoint (on_end).
        model: the model being trained (an `attnseq.models.Seq2Seq`, a torch.nn.Module).
        reason: on_end only: why training stopped ("max_steps reached", "early stopping", the
            callback that asked, ...).
        stop: set it to True (or return True) to end the run after this update or validation.
    """

    step: int
    epoch: float
    metrics: dict[str, float]
    model: torch.nn.Module
    reason: str | None = None
    stop: bool = False


class Callback:
    """A base class with no-op methods: override those you need (docs/internals/training.md).

    Any object with some of the methods `on_update`, `on_validation`, `on_end` works as well;
    `attnseq.train` checks that each callback has at least one of them.
    """

    def on_update(self, event: TrainingEvent) -> bool | None:
        """After each optimizer update; True (or `event.stop = True`) ends the run, False or
        None lets it go on; any other value is a TypeError."""
        return None

    def on_validation(self, event: TrainingEvent) -> bool | None:
        """After each validation; True (or `event.stop = True`) ends the run, False or None
        lets it go on; any other value is a TypeError."""
        return None

    def on_end(self, event: TrainingEvent) -> None:
        """After the test evaluation of a run that ended normally."""
        return None


def check_callbacks(callbacks: object, name: str = "callbacks") -> list[Any]:
    """`callbacks` as a list, each with at least one of the methods; TypeError naming the
    argument otherwise (a lone callback included: it is one, not a list of them)."""
    if isinstance(callbacks, str | bytes | dict) or not isinstance(callbacks, Iterable):
        raise TypeError(
            f"{name} must be a list of callbacks (objects with on_update, on_validation or "
            f"on_end), not {type(callbacks).__name__}"
        )
    checked = list(callbacks)
    for index, callback in enumerate(checked):
        if isinstance(callback, type):
            raise TypeError(
                f"{name}[{index}] is the class {callback.__name__}: pass an instance, "
                f"{callback.__name__}()"
            )
        if not any(callable(getattr(callback, hook, None)) for hook in HOOKS):
            raise TypeError(
                f"{name}[{index}] ({type(callback).__name__}) has none of the methods "
                f"{', '.join(HOOKS)}"
            )
    return checked


class Callbacks:
    """The run's callbacks, called in order; each call guarded so that it leaves the model's
    mode and the training's random-number stream as they were."""

    def __init__(self, callbacks: Sequence[Any] = ()) -> None:
        self.callbacks = list(callbacks)
        self.stop_reason: str | None = None  # the first request to stop, in words

    def wants(self, hook: str) -> bool:
        """Whether a callback overrides `hook` (the no-op of `Callback` does not count)."""
        for callback in self.callbacks:
            method = getattr(type(callback), hook, None)
            if method is not None and method is not getattr(Callback, hook):
                return True
            if method is None and callable(getattr(callback, hook, None)):
                return True  # set on the instance
        return False

    def update(self, step: int, epoch: float, metrics: dict[str, float], model: Any) -> None:
        self._call("on_update", TrainingEvent(step, epoch, metrics, model))

    def validation(self, step: int, epoch: float, metrics: dict[str, float], model: Any) -> None:
        self._call("on_validation", TrainingEvent(step, epoch, metrics, model))

    def end(
        self, step: int, epoch: float, metrics: dict[str, float], model: Any, reason: str | None
    ) -> None:
        self._call("on_end", TrainingEvent(step, epoch, metrics, model, reason=reason))

    def _call(self, hook: str, event: TrainingEvent) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is None:
                continue
            event.metrics = dict(event.metrics)  # a callback that edits its copy changes no other's
            training = event.model.training
            with preserved_rng():
                answer = method(event)
            event.model.train(training)
            asked = _answer(answer, f"{type(callback).__name__}.{hook}")
            if (asked or event.stop) and self.stop_reason is None and hook != "on_end":
                self.stop_reason = f"{type(callback).__name__}.{hook} asked to stop"
            event.stop = False


def _answer(value: object, method: str) -> bool:
    """Whether a hook's return value asks to stop: True (numpy's too) does, False and None do
    not; anything else (a string, a number, a tensor) is a TypeError naming `method`, since
    its truth would be taken for an answer the callback may not mean."""
    if value is None:
        return False
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(
        f"{method} returned {_shown(value)} ({type(value).__name__}): return True to end the "
        "run, False or None to let it go on"
    )


def _shown(value: object, limit: int = 60) -> str:
    """The repr of `value`, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
