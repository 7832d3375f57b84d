"""What a run reports while it trains: train/* scalars in TensorBoard and one log line every
`trainer.log_every` updates (step, epoch, loss, ppl, lr, target tokens/s, gradient norm,
elapsed time, ETA), into train.log and onto a redirected stdout.

Throughput counts real tokens (no padding) of the global batch: target tokens/s is the unit
Joey NMT and fairseq report; source+target tokens/s and the padding share come with it.
"""

import logging
import time
from typing import Any

from attnseq.data.batching import TokenBatchSampler
from attnseq.evaluation.metrics import perplexity
from attnseq.io.progress import ON_BAR
from attnseq.training.distributed import WorldInfo
from attnseq.training.state import TrainingState

log = logging.getLogger("attnseq")


class ThroughputWindow:
    """Loss and tokens/s averaged over the steps since the last train/* log line."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.loss_sum = 0.0
        self.norm_sum = 0.0
        self.steps = 0
        self.src_tokens = 0.0
        self.tgt_tokens = 0.0
        self.padded = 0.0

    def add(self, tokens: tuple[float, float, float], loss: float, norm: float) -> None:
        """One step: its (global) real source and target tokens and padded positions, its loss
        and gradient norm."""
        self.loss_sum += loss
        self.norm_sum += norm
        self.steps += 1
        self.src_tokens += tokens[0]
        self.tgt_tokens += tokens[1]
        self.padded += tokens[2]

    def flush(self) -> dict[str, float]:
        """The averages since the last flush; starts a new window."""
        seconds = max(time.perf_counter() - self.start, 1e-9)
        real = self.src_tokens + self.tgt_tokens
        loss = self.loss_sum / max(self.steps, 1)
        stats = {
            "loss": loss,
            "tokens_per_sec": self.tgt_tokens / seconds,  # target tokens, the peers' unit
            "src_tgt_tokens_per_sec": real / seconds,
            "padding_share": 1.0 - real / max(self.padded, 1),
            "grad_norm": self.norm_sum / max(self.steps, 1),
            "ppl": perplexity(loss),
        }
        self.reset()
        return stats


class TrainLog:
    """train/* scalars and log lines of one training session.

    Args:
        writer: a SummaryWriter (a NullWriter on ranks that write nothing).
        total_steps: the updates the run is heading for (max_steps, or max_epochs in updates).
        max_minutes: the run's wall-clock budget, for the ETA (None: none).
        speaks: this process logs (rank 0); the others only write (nothing, to a NullWriter).
    """

    def __init__(
        self, writer: Any, total_steps: int, max_minutes: float | None, speaks: bool
    ) -> None:
        self.writer = writer
        self.total_steps = total_steps
        self.max_minutes = max_minutes
        self.speaks = speaks
        self.window = ThroughputWindow()
        self.session_start = time.monotonic()
        self.session_start_step = 0

    def start_session(self, step: int) -> None:
        """This process begins (or resumes) training at update `step`."""
        self.session_start, self.session_start_step = time.monotonic(), step
        self.window.reset()

    def report(self, step: int, epoch: float, lr: float, elapsed: float) -> None:
        """Scalars and one line for the steps since the previous report."""
        stats = self.window.flush()
        for name, value in stats.items():
            self.writer.add_scalar(f"train/{name}", value, step)
        self.writer.add_scalar("train/lr", lr, step)
        if not self.speaks:
            return
        eta = self.eta_seconds(step, elapsed)
        log.info(
            "step %d/%d  epoch %.2f  loss %.4f  ppl %.2f  lr %.3g  %s tgt tok/s  grad norm %.3g  "
            "elapsed %s  ETA %s",
            step,
            self.total_steps,
            epoch,
            stats["loss"],
            stats["ppl"],
            lr,
            f"{stats['tokens_per_sec']:,.0f}",
            stats["grad_norm"],
            clock(elapsed),
            "-" if eta is None else clock(eta),
            extra={ON_BAR: True},  # the live bar shows these numbers on a terminal
        )

    def eta_seconds(self, step: int, elapsed: float) -> float | None:
        """Seconds until the budget that binds first: the steps left at this session's pace,
        or what is left of max_minutes."""
        done = step - self.session_start_step
        session_seconds = time.monotonic() - self.session_start
        estimates = []
        if done > 0 and session_seconds > 0:
            estimates.append(max(self.total_steps - step, 0) * session_seconds / done)
        if self.max_minutes:
            estimates.append(max(60 * self.max_minutes - elapsed, 0.0))
        return min(estimates, default=None)


def announce(
    state: TrainingState,
    examples: int,
    sampler: TokenBatchSampler,
    total_steps: int,
    world: WorldInfo,
    accumulate: int = 1,
) -> None:
    """The opening lines of a training session: data, batches, budget; where a resumed run
    picks up."""
    batches = len(sampler)
    processes = f" on each of {world.world_size} processes" if world.distributed else ""
    grouping = f", {accumulate} per update" if accumulate > 1 else ""
    log.info(
        "training: %d examples, %d batches per epoch%s%s (padding %.1f%% of positions), "
        "up to %d steps",
        examples,
        batches,
        processes,
        grouping,
        100 * sampler.padding_share(0),
        total_steps,
    )
    if state.step or state.batch_in_epoch or state.epoch:
        log.info(
            "resuming at step %d (epoch %d, batch %d of %d)",
            state.step,
            state.epoch + 1,
            state.batch_in_epoch,
            batches,
        )


class NullWriter:
    """Stands in for a SummaryWriter on ranks that write nothing (all but rank 0)."""

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def clock(seconds: float) -> str:
    """H:MM:SS."""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
