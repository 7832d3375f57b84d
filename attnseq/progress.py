"""Progress bars (rich): steps done, loss, epoch, elapsed time and ETA.

On a terminal the bar redraws in place; elsewhere (CI, redirected output) it stays silent, so
logs are not flooded: train.log carries the numbers.
"""

import sys
from types import TracebackType

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrainingProgress:
    """`with TrainingProgress(total, start, enabled) as bar: bar.advance(loss, epoch)`."""

    def __init__(self, total_steps: int, start_step: int = 0, enabled: bool = True) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.total = total_steps
        self.start = start_step
        self.progress: Progress | None = None
        self.task = None
        self.smoothed_loss: float | None = None

    def __enter__(self) -> "TrainingProgress":
        if self.enabled:
            self.progress = Progress(
                TextColumn("[bold]train[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}  epoch {task.fields[epoch]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                "train", total=self.total, completed=self.start, loss="-", epoch=0
            )
        return self

    def advance(self, loss: float, epoch: int) -> None:
        # exponential moving average: a readable loss, not one batch's noise
        self.smoothed_loss = (
            loss if self.smoothed_loss is None else 0.95 * self.smoothed_loss + 0.05 * loss
        )
        if self.progress is not None:
            self.progress.update(
                self.task, advance=1, loss=f"{self.smoothed_loss:.3f}", epoch=epoch + 1
            )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.progress is not None:
            self.progress.stop()
