"""When a run stops: its budget, early stopping, stop signals (SIGINT/SIGTERM end it resumably)
and divergence."""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from attnseq.config.choices import Metric
from attnseq.config.schema import TrainerConfig
from attnseq.training.distributed import is_main_process
from attnseq.training.state import TrainingState


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run.

    Attributes:
        signum: the signal.
        graceful: True when the loop finished its step and wrote last.pt at `step`; False when
            the run stopped at once (second SIGINT, or outside the training loop).
        step: the step of the newest last.pt this process wrote (None: none yet).
        resume: what continues the run in the caller's words (`attnseq.train` sets its call);
            None where the caller says it itself (the command line prints its command).
    """

    def __init__(self, signum: int, graceful: bool, step: int | None = None) -> None:
        self.signum = signum
        self.graceful = graceful
        self.step = step
        self.resume: str | None = None
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    def tell(self, message: str, resume: str) -> None:
        """Make `message` (what was saved and how to continue) the exception's text, and
        `resume` the call that continues the run."""
        self.resume = resume
        self.args = (message,)

    @property
    def exit_status(self) -> int:
        """128 + signal number, the shell's convention: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


# ------------------------------------------------------------------------------ signals
class StopSignals:
    """SIGINT/SIGTERM handling for a training run (`with StopSignals() as stop: ...`).

    Inside `stop.graceful()` (the training loop) the first signal only records a request: the
    loop finishes the current step, writes last.pt and raises `TrainingInterrupted`, so no update
    is lost. A second SIGINT there, or a signal anywhere else in the block (data preparation, the
    final test evaluation), raises `TrainingInterrupted` at once; the atomic writers remove
    their temporary file, so even then every file on disk is whole.

    Handlers can only be installed from the main thread; elsewhere this does nothing and the
    process keeps its default behaviour.

    Under torchrun the agent forwards SIGINT/SIGTERM to every rank (and a terminal's Ctrl-C
    reaches them all). The request of any rank is combined into the all-reduce that closes each
    step, so all ranks finish the same step, rank 0 writes last.pt and every rank raises
    `TrainingInterrupted`; nothing waits on a rank that has left. torchrun kills workers that
    have not exited some 30 s after forwarding the signal, so a step plus one checkpoint write
    must fit in that time. A second Ctrl-C stops that rank at once; torchrun then ends the rest.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._graceful = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @contextlib.contextmanager
    def graceful(self) -> Iterator[None]:
        self._graceful = True
        try:
            yield
        finally:
            self._graceful = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if self._graceful and (first or signum != signal.SIGINT):
            if first and is_main_process():  # under torchrun every rank gets the signal
                # os.write, not print/logging: a handler may interrupt the main thread inside
                # a buffered write, and re-entering the same buffer raises.
                name = signal.Signals(signum).name
                os.write(
                    2,
                    f"\nattnseq: {name} received: finishing the current step and writing "
                    "last.pt (press Ctrl-C again to stop at once)\n".encode(),
                )
            return
        raise TrainingInterrupted(signum, graceful=False)


def kept_checkpoints(folder: Path, last_saved_step: int | None) -> str:
    """What the checkpoint folder of a run that stops without writing holds, in words: the
    step of the newest last.pt this session wrote, or that it wrote none."""
    if last_saved_step is not None:
        return f"{folder / 'last.pt'} is from step {last_saved_step}"
    return f"no checkpoint of this session was written; {folder} keeps whatever it held before"


class TrainingDiverged(Exception):
    """Too many non-finite losses (or gradients) in a row; no checkpoint was overwritten."""


class StoppingPolicy:
    """Decides when training stops and when a periodic resume point is due.

    Args:
        signals: the run's signal handling; without it no signal stops the run gracefully.
    """

    def __init__(self, trainer: TrainerConfig, signals: StopSignals | None = None) -> None:
        self.cfg = trainer
        self.metric: Metric = trainer.early_stopping_metric
        self.signals = signals

    @property
    def stop_requested(self) -> bool:
        """A SIGINT/SIGTERM arrived in this process."""
        return self.signals is not None and self.signals.requested

    def reason(self, state: TrainingState) -> str | None:
        """Why training should stop now, or None."""
        cfg = self.cfg
        if cfg.max_steps and state.step >= cfg.max_steps:
            return "max_steps reached"
        if state.epoch >= cfg.max_epochs:
            return "max_epochs reached"
        if cfg.max_minutes and state.train_seconds >= 60 * cfg.max_minutes:
            return "max_minutes reached"
        return self._early_stop(state)

    def _early_stop(self, state: TrainingState) -> str | None:
        target, best, name = self.cfg.early_stopping_target, state.best_metric, self.metric.value
        if best is None:
            return None
        if target is not None and (
            best >= target if self.metric.higher_is_better else best <= target
        ):
            return f"valid/{name} reached the target {target:.4g}"
        if best == self.metric.best_possible:
            # Validation cannot improve on its ceiling: more updates cannot change best.pt.
            return f"valid/{name} reached its best possible value {best:.4g}"
        patience = self.cfg.early_stopping_patience
        if patience and state.stale_validations >= patience:
            return "early stopping"
        return None

    def record_validation(self, state: TrainingState, value: float) -> bool:
        """Update the early-stopping state with a validation value; True for a new best."""
        best = state.best_metric
        improved = best is None or (value > best if self.metric.higher_is_better else value < best)
        state.validated_step = state.step
        if improved:
            state.best_metric, state.best_step = value, state.step
            state.stale_validations = 0
        else:
            state.stale_validations += 1
        return improved

    def record_skip(self, state: TrainingState) -> bool:
        """Count a skipped (non-finite) update; True when the run must stop as diverged."""
        state.skipped_steps += 1
        state.nonfinite_in_a_row += 1
        return state.nonfinite_in_a_row >= self.cfg.max_nonfinite_steps

    def save_due(self, state: TrainingState, last_save: float) -> bool:
        """A periodic resume point: every `save_every_steps` updates or `save_every_minutes`
        since `last_save` (a time.monotonic() value)."""
        every = self.cfg.save_every_steps
        if every and state.step % every == 0:
            return True
        minutes = self.cfg.save_every_minutes
        return bool(minutes) and time.monotonic() - last_save >= 60 * minutes

    def diverged(
        self, state: TrainingState, step: int, folder: Path, last_saved_step: int | None
    ) -> TrainingDiverged:
        """The error that ends a diverged run whose streak of skipped updates ended at update
        `step`; says what the checkpoint folder still holds."""
        kept = kept_checkpoints(folder, last_saved_step)
        return TrainingDiverged(
            f"training diverged: {state.nonfinite_in_a_row} non-finite losses or gradients "
            f"in a row, up to step {step} "
            f"(trainer.max_nonfinite_steps={self.cfg.max_nonfinite_steps}); "
            f"those updates were skipped and no checkpoint was overwritten ({kept}). "
            "Lower optim.lr, use more optim.warmup_steps or gradient clipping "
            "(optim.clip_norm), or check the data"
        )
