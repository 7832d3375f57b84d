"""Where training is, saved in every checkpoint: the counters a resumed run continues and the
random-number-generator states, so that it draws what a run that never stopped draws."""

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class TrainingState:
    """Where training is; saved in every checkpoint (as `progress`) so a run can resume exactly.

    Counters a resumed run must continue (not restart) live here, not on the Trainer.
    """

    step: int = 0  # updates done, those skipped for a non-finite loss or gradient included
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed (updates and skips)
    best_metric: float | None = None
    best_step: int = 0
    stale_validations: int = 0  # validations since the best one
    validated_step: int = 0  # step of the latest validation (the final one is not repeated)
    skipped_steps: int = 0  # batches whose loss or gradient was not finite, in total
    nonfinite_in_a_row: int = 0  # ... the current streak of them
    overflow_steps: int = 0  # fp16 updates skipped because the scaled gradients overflowed
    train_seconds: float = 0.0  # wall-clock time of the loop, over all resumed sessions
    world_size: int = 1  # data-parallel processes: batch_in_epoch counts batches of one of them

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainingState":
        """From a checkpoint's `progress`; keys an older checkpoint lacks keep their default."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})

    def end_batch(self, batches_in_epoch: int) -> None:
        """One batch of the epoch consumed; at the epoch's last one, the next epoch begins."""
        self.batch_in_epoch += 1
        if self.batch_in_epoch >= batches_in_epoch:
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0


def rng_state() -> dict[str, Any]:
    """The generator states the training loop draws from (dropout: torch; CUDA when in use)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    # is_initialized, not is_available: a CPU run on a GPU machine must not create a context.
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state` (a CUDA state is applied only where the devices match)."""
    torch.set_rng_state(state["torch"])
    if "python" in state:
        version, internal, gauss = state["python"]
        # weights_only loading turns the tuple of ints into a list; random wants a tuple.
        random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run the body without moving the training RNG stream: validation happens at different
    points of a resumed and an uninterrupted run's process lifetime, so anything it draws
    (today nothing: eval mode has no dropout) must not shift the draws of later steps."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
