"""Where training is: the counters a resumed run continues, saved in every checkpoint."""

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class TrainingState:
    """Where training is; saved in every checkpoint (as `progress`) so a run can resume exactly.

    Counters a resumed run must continue (not restart) live here, not on the Trainer.
    """

    step: int = 0  # optimizer updates done (skipped non-finite batches are not updates)
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
