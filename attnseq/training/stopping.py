"""When a run stops: its budget, early stopping, stop signals and divergence.

- Budget: `trainer.max_steps`, `trainer.max_epochs`, `trainer.max_minutes` (training seconds
  over all resumed sessions).
- Early stopping on the validation metric: a target value (`early_stopping_target`), the
  metric's best possible value (more updates cannot improve best.pt then), or
  `early_stopping_patience` validations without a new best.
- Signals: SIGINT/SIGTERM (signals.py) ask the run to stop after the current step.
- Divergence: `trainer.max_nonfinite_steps` skipped (non-finite) updates in a row raise
  `TrainingDiverged`.

A checkpoint written after a run stopped makes `reason` true again on resume, so resuming a
finished run trains nothing.
"""

import time
from pathlib import Path

from attnseq.config.choices import Metric
from attnseq.config.schema import TrainerConfig
from attnseq.training.signals import StopSignals
from attnseq.training.state import TrainingState


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
        self, state: TrainingState, folder: Path, last_saved_step: int | None
    ) -> TrainingDiverged:
        """The error that ends a diverged run; says what the checkpoint folder still holds."""
        kept = (
            f"{folder / 'last.pt'} is from step {last_saved_step}"
            if last_saved_step is not None
            else f"no checkpoint of this session was written; {folder} keeps whatever it held "
            "before"
        )
        return TrainingDiverged(
            f"training diverged: {state.nonfinite_in_a_row} non-finite losses or gradients "
            f"in a row after step {state.step} "
            f"(trainer.max_nonfinite_steps={self.cfg.max_nonfinite_steps}); "
            f"those updates were skipped and no checkpoint was overwritten ({kept}). "
            "Lower optim.lr, use more optim.warmup_steps or gradient clipping "
            "(optim.clip_norm), or check the data"
        )
