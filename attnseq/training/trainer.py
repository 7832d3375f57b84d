"""The training loop: batches in, updates (train_step.py), periodic validation and checkpoints
out, until the stopping policy says the run is done (docs/internals/training.md)."""

import contextlib
import itertools
import logging
import math
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from attnseq.config.schema import TrainConfig
from attnseq.data.batching import Batch, PieceLinks, TokenBatchSampler, example_lengths
from attnseq.data.extended_vocab import ExtendedExample
from attnseq.data.loader import BatchLoader, TokenCounts
from attnseq.errors import UserError
from attnseq.evaluation.evaluator import Evaluator
from attnseq.io.progress import TrainingProgress
from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.callbacks import Callbacks
from attnseq.training.checkpointer import Checkpointer
from attnseq.training.distributed import WorldInfo, all_reduce_sum, broadcast_object, world
from attnseq.training.ema import WeightEMA
from attnseq.training.optim import LearningRateSchedule
from attnseq.training.precision import MixedPrecision
from attnseq.training.state import TrainingState, preserved_rng, set_rng_state
from attnseq.training.stopping import StoppingPolicy, StopSignals, TrainingInterrupted
from attnseq.training.train_log import NullWriter, TrainLog, announce, log_interval
from attnseq.training.train_step import StepOutcome, UpdateParts, supervised_attention, train_step

log = logging.getLogger("attnseq")


class Trainer:
    """Runs the updates; validates and checkpoints along the way.

    Inside an initialised process group it trains data-parallel (distributed.py).
    Ranks other than 0 write nothing and do not validate; they may pass `evaluator=None`.

    Args:
        schedule: owns the learning rate; its budget learns the batches per epoch here.
        evaluator: the validation split's evaluator (used on rank 0 only).
        static_payload: checkpoint fields that never change during the run (config dict,
            tokenizer states), merged into every checkpoint.
        on_validation: called with (model, step) after each validation, e.g. to draw heatmaps
            (rank 0 only).
        stop: the run's signal handling; without it SIGINT/SIGTERM keep their default effect.
        extended_examples: copy models: the extended-vocabulary view of every training example
            (attnseq/data/extended_vocab.py), aligned with `train_examples`.
        alignments: guided alignment: the gold piece links of every training example
            (attnseq/data/guided_alignment.py), aligned with `train_examples`.
        callbacks: the caller's callbacks (callbacks.py), called on rank 0.
        progress: the training bar: None as `trainer.progress` says, on a terminal only; True
            wherever stderr goes (a notebook: attnseq/io/progress.py); False none.
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: torch.optim.Optimizer,
        schedule: LearningRateSchedule,
        cfg: TrainConfig,
        train_examples: Sequence[tuple[list[int], list[int]]],
        evaluator: Evaluator | None,
        run_dir: Path,
        writer: Any,
        device: torch.device,
        static_payload: dict[str, Any],
        on_validation: Callable[[Seq2Seq, int], None] | None = None,
        stop: StopSignals | None = None,
        extended_examples: list[ExtendedExample] | None = None,
        alignments: list[PieceLinks] | None = None,
        callbacks: Callbacks | None = None,
        progress: bool | None = None,
    ) -> None:
        self.model, self.optimizer, self.schedule, self.cfg = model, optimizer, schedule, cfg
        self.stop_reason: str | None = None  # why `fit` stopped
        self.examples = train_examples
        self.evaluator = evaluator
        self.on_validation = on_validation
        self.state = TrainingState()
        self.world = world()
        self.state.world_size = self.world.world_size
        self.writer = writer if self.world.is_main else NullWriter()  # only rank 0 writes
        self.policy = StoppingPolicy(cfg.trainer, stop)
        self.sampler = self._sampler()
        self.accumulate = cfg.optim.accumulate
        self.schedule.budget.steps_per_epoch = self.updates_per_epoch
        self.precision = MixedPrecision(cfg.trainer.precision.name, device)
        self.loader = BatchLoader(
            train_examples,
            pad_id=model.pad_id,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
            device=device,
            num_workers=cfg.trainer.num_workers,
            pin_memory=cfg.trainer.pin_memory,
            extended=extended_examples,
            alignments=alignments,
        )
        module = training_module(model, self.world, device, cfg.trainer.compile, self.sampler)
        parts = (module, model, optimizer, self.precision, cfg.optim, self.world)
        self.parts = UpdateParts(*parts, supervised_attention(cfg))
        self.ema = WeightEMA(model, cfg.optim.ema_decay) if cfg.optim.ema_decay else None
        self.checkpointer = Checkpointer(
            run_dir / "checkpoints",
            static_payload,
            cfg.trainer.keep_last,
            self.world,
            model,
            optimizer,
            schedule,
            self.precision,
            self.ema,
        )
        # Updates whose numbers are still on the device (StepOutcome), read every `read_every`
        # updates: on the CPU reading costs nothing, so at once; on a GPU reading makes the host
        # wait for the device, so with the training log's lines, before validating or saving;
        # and at once where a callback hears of each update (`listen`).
        self._pending: list[tuple[int, StepOutcome]] = []
        self._last_applied = True  # whether the newest update read so far was applied
        self.log_every = log_interval(cfg.trainer.log_every, self.total_steps)
        self.read_every = 1 if device.type == "cpu" else self.log_every
        self.listen(callbacks, progress)
        self._report = TrainLog(NullWriter(), 0, None, False)
        self._bar = TrainingProgress(0, enabled=False)
        self._resume_rng: dict[str, Any] | None = None
        self._clock_start = time.monotonic()
        self._seconds_before = 0.0

    def listen(self, callbacks: Callbacks | None, progress: bool | None = None) -> None:
        """The caller's callbacks (None: none) and bar (see the class's `progress`)."""
        self.callbacks = callbacks if callbacks is not None else Callbacks()
        self.progress = progress
        # A callback that hears of each update gets its loss and the model after it at once.
        heard = self.callbacks.wants("on_update")
        self._hear_updates = heard and self.world.is_main
        if heard:
            self.read_every = 1

    def _sampler(self) -> TokenBatchSampler:
        data = self.cfg.data
        return TokenBatchSampler(
            example_lengths(self.examples),
            max_tokens=data.max_tokens,
            max_sentences=data.max_sentences,
            shuffle=True,
            seed=self.cfg.seed,
            num_replicas=self.world.world_size,
            rank=self.world.rank,
        )

    @property
    def updates_per_epoch(self) -> int:
        """Optimizer updates in one epoch: its batches, `optim.accumulate` at a time."""
        return math.ceil(len(self.sampler) / self.accumulate)

    @property
    def total_steps(self) -> int:
        """The updates the run is heading for: max_epochs in updates, or max_steps if fewer."""
        trainer_cfg = self.cfg.trainer
        total = trainer_cfg.max_epochs * self.updates_per_epoch
        return min(total, trainer_cfg.max_steps) if trainer_cfg.max_steps else total

    @property
    def training_metrics(self) -> dict[str, float]:
        """train/loss, train/nll and train/ppl of this session's newest training log line (of
        the updates since the line before it); empty when it logged none."""
        return dict(self._report.last)

    @property
    def last_saved_step(self) -> int | None:
        """Step of the newest last.pt this process wrote (None: none yet)."""
        return self.checkpointer.last_saved_step

    def restore(self, payload: dict[str, Any]) -> None:
        """Continue from a checkpoint: weights, optimizer, schedule, state and RNG (the RNG
        right before the first step, so that whatever is built in between cannot shift it)."""
        self.state, self._resume_rng = self.checkpointer.restore(payload)

    # ----------------------------------------------------------------------- main loop
    def fit(self) -> TrainingState:
        """Train until the stopping policy says so; returns the final state.

        Raises:
            TrainingInterrupted: a SIGINT/SIGTERM arrived (last.pt holds the last step).
            TrainingDiverged: `trainer.max_nonfinite_steps` non-finite losses in a row.
        """
        trainer_cfg, state = self.cfg.trainer, self.state
        total_steps = self.total_steps
        if self.world.is_main:
            announce(
                state, len(self.examples), self.sampler, total_steps, self.world, self.accumulate
            )
        if self._resume_rng is not None:  # the stream continues where the checkpoint left it
            set_rng_state(self._resume_rng)
        self._clock_start = self.checkpointer.last_save = time.monotonic()
        self._seconds_before = state.train_seconds
        report = TrainLog(self.writer, total_steps, trainer_cfg.max_minutes, self.world.is_main)
        report.start_session(state.step)
        self._report = report
        if state.batch_in_epoch >= len(self.sampler):  # a checkpoint at an epoch's end
            state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        stop_reason = self.policy.reason(state)
        if self.world.is_main and stop_reason is not None and state.step:
            log.info("nothing left to train: %s", stop_reason)
        signals = self.policy.signals
        graceful = signals.graceful() if signals is not None else contextlib.nullcontext()
        with graceful, self._progress_bar(total_steps) as bar:
            self._bar = bar
            updates = self._updates()
            while stop_reason is None:
                micro_batches = next(updates, None)
                if micro_batches is None:
                    stop_reason = "no training batches"
                    break
                outcome = self.update(micro_batches)
                for _ in micro_batches:
                    state.end_batch(len(self.sampler))
                validated = self._after_update(outcome, report, bar)
                stop_reason = self._after_step(validated)
            self._read_outcomes()
            if report.window.steps and report.reported_step != state.step:
                # the updates since the last line: the curves end where training ended
                report.report(state.step, self.epochs_done, self.schedule.lr, self._train_seconds())
            if state.validated_step != state.step:
                self._validate()  # the final state is always validated and checkpointed
            if self._sync_decisions()[0]:
                self._interrupted()  # arrived during the final validation; last.pt is written
        self._log(logging.INFO, "training stopped after %d steps: %s", state.step, stop_reason)
        self.stop_reason = stop_reason
        return state

    def _progress_bar(self, total_steps: int) -> TrainingProgress:
        """Rank 0's bar: as `trainer.progress` says on a terminal, or as the caller asked
        (`progress`: True draws it wherever stderr goes, a notebook included)."""
        shown = self.cfg.trainer.progress if self.progress is None else self.progress
        shown = shown and self.world.is_main
        return TrainingProgress(total_steps, self.state.step, shown, self.progress is True)

    def _updates(self) -> Iterator[list[tuple[Batch, TokenCounts]]]:
        """The micro-batches of each update from the current position on, epoch after epoch
        (as tensors): `optim.accumulate` consecutive batches of one epoch each. The state's
        epoch moves on as each epoch's last batch is counted (`end_batch`)."""
        while True:
            state = self.state
            batches = self.sampler.epoch_batches(state.epoch)[state.batch_in_epoch :]
            if not batches:  # no training data: nothing to iterate over
                return
            tensors = self.loader(batches, state.epoch)
            while group := list(itertools.islice(tensors, self.accumulate)):
                yield group

    def update(self, micro_batches: list[tuple[Batch, TokenCounts]]) -> StepOutcome:
        """One optimizer update (train_step.py; skipped on the device when its loss or
        gradient norm is not finite), then the moving average's step and the schedule's step
        to the lr of the next update."""
        try:
            outcome = train_step(self.parts, micro_batches, self.state.step)
        except torch.OutOfMemoryError:
            raise self._out_of_memory(micro_batches) from None
        if self.ema is not None:
            self.ema.update(self.model)  # after a skipped update: towards the same weights
        # Seconds are those of the previous step's end (the value all ranks share).
        self.schedule.after_update(self.state.step + 1, self.state.train_seconds)
        return outcome

    def _out_of_memory(self, micro_batches: list[tuple[Batch, TokenCounts]]) -> UserError:
        """The one line an out-of-memory error of the device becomes: the batch that failed,
        what to lower, and the checkpoint that stays (nothing is written after the failure)."""
        batch, counts = micro_batches[0]
        saved, last = self.last_saved_step, self.checkpointer.folder / "last.pt"
        kept = f"last.pt (step {saved}) is kept" if saved is not None else "no checkpoint yet"
        if saved is None and last.is_file():
            kept = "last.pt of the resumed checkpoint is kept"
        data = self.cfg.data
        return UserError(
            f"out of {batch.src.device} memory in update {self.state.step + 1}, on a batch of "
            f"{batch.src.size(0)} sentences ({int(counts.src)} source and {int(counts.tgt)} "
            f"target tokens; longest source {batch.src.size(1)}, target {batch.tgt_in.size(1)}) "
            f"under data.max_tokens={data.max_tokens}: lower data.max_tokens (optim.accumulate=N "
            f"keeps the tokens per update) or data.max_sentences, or the model; {kept}"
        )

    def _after_update(self, outcome: StepOutcome, report: TrainLog, bar: TrainingProgress) -> bool:
        """Count the update, read the pending outcomes, report and validate when due; True
        when it validated (and so wrote last.pt)."""
        state, trainer_cfg = self.state, self.cfg.trainer
        state.step += 1
        self._pending.append((state.step, outcome))
        bar.advance(None, state.epoch, outcome.tokens[1], self.schedule.lr)
        logs = state.step % self.log_every == 0
        if logs or state.step % self.read_every == 0:
            self._read_outcomes()
        if logs:
            report.report(state.step, self.epochs_done, self.schedule.lr, self._train_seconds())
        if state.step % trainer_cfg.validate_every == 0:
            self._validate()
            return True
        return False

    def _read_outcomes(self) -> None:
        """Read the updates' numbers not read yet (one host-device synchronisation) and count
        them: losses into the report and the bar, fp16 overflows, skipped updates (raises
        TrainingDiverged after `trainer.max_nonfinite_steps` in a row). Runs before anything
        is written, so no checkpoint holds a state whose skips were not counted."""
        pending, self._pending = self._pending, []
        StepOutcome.read_all([outcome for _, outcome in pending])
        state = self.state
        for step, outcome in pending:
            self._last_applied = outcome.applied
            if outcome.applied:
                state.nonfinite_in_a_row = 0
                self._report.window.add(
                    outcome.tokens, outcome.loss, outcome.grad_norm, outcome.nll
                )
                self._bar.add_losses([outcome.loss])
            elif outcome.loss_scale is not None:  # an fp16 overflow: expected, not divergence
                state.overflow_steps += 1
                self.writer.add_scalar("train/overflow_steps", state.overflow_steps, step)
                self.writer.add_scalar("train/loss_scale", outcome.loss_scale, step)
            else:
                self._skipped(outcome.problem, step)
            if self._hear_updates:  # read at every update then: `step` is the newest
                metrics = {
                    "train/loss": outcome.loss,
                    "train/nll": outcome.nll,
                    "train/grad_norm": outcome.grad_norm,
                }
                self.callbacks.update(step, self.epochs_done, metrics, self.model)

    def _after_step(self, validated: bool) -> str | None:
        """After each update: agree on signals and the clock, write a due resume point, stop
        on a signal; returns why training stops (None: it goes on). A validation has written
        last.pt already."""
        stop_requested, save_due, asked = self._sync_decisions()
        stop_reason = self.policy.reason(self.state)
        if stop_reason is None and asked:
            stop_reason = self.callbacks.stop_reason or "a callback on the main process asked"
        saved = validated
        if not validated and stop_reason is None and save_due:
            saved = self._save_last(after_a_skip=False)
        if stop_requested:
            if not saved:
                self._save_last(after_a_skip=True)
            self._interrupted()
        return stop_reason

    def _save_last(self, after_a_skip: bool) -> bool:
        """Write last.pt, unless the newest update was skipped and `after_a_skip` is False (a
        periodic resume point waits for the next applied update, so that it never lands in a
        streak of non-finite updates). A diverged run raises here, before anything is
        written. True when written."""
        self._read_outcomes()
        if not (after_a_skip or self._last_applied):
            return False
        self.checkpointer.save("last.pt", self.state)
        return True

    def _sync_decisions(self) -> tuple[bool, bool, bool]:
        """(stop requested by a signal, periodic save due, a callback asked to stop) after a
        step; updates `state.train_seconds`.

        Data-parallel: one all-reduce makes all three the same on every rank, a signal that
        reached any rank stops them all, and rank 0's clock (the only one whose time is saved)
        decides max_minutes and save_every_minutes; callbacks run on rank 0.
        """
        seconds = self._train_seconds()
        requested = self.policy.stop_requested
        save_due = self.policy.save_due(self.state, self.checkpointer.last_save)
        asked = self.callbacks.stop_reason is not None
        if not self.world.distributed:
            self.state.train_seconds = seconds
            return requested, save_due, asked
        main = self.world.is_main
        seconds, saves, requests, asks = all_reduce_sum(
            [seconds if main else 0.0, float(main and save_due), float(requested), float(asked)]
        )
        self.state.train_seconds = seconds
        return requests > 0, saves > 0, asks > 0

    def _skipped(self, problem: str, step: int) -> None:
        """Count the skipped update `step`; stop the run after `max_nonfinite_steps` in a
        row."""
        state = self.state
        self.writer.add_scalar("train/skipped_steps", state.skipped_steps + 1, step)
        diverged = self.policy.record_skip(state)
        limit = self.cfg.trainer.max_nonfinite_steps
        self._log(
            logging.WARNING,
            "step %d: non-finite %s; update skipped (%d in a row, %d in total; "
            "the run stops at %d in a row)",
            step,
            problem,
            state.nonfinite_in_a_row,
            state.skipped_steps,
            limit,
        )
        if not diverged:
            return
        self.writer.flush()
        # No checkpoint is written here: the files on disk are the last good state.
        raise self.policy.diverged(state, step, self.checkpointer.folder, self.last_saved_step)

    def _interrupted(self) -> None:
        # Data-parallel: a signal to any rank stops all; one that got none reports SIGTERM.
        signals = self.policy.signals
        signum = signals.signum if signals is not None else None
        signum = signum if signum is not None else signal.SIGTERM
        self._log(
            logging.WARNING,
            "stopped by %s after step %d; %s written",
            signal.Signals(signum).name,
            self.state.step,
            self.checkpointer.folder / "last.pt",
        )
        raise TrainingInterrupted(signum, graceful=True, step=self.last_saved_step)

    def _train_seconds(self) -> float:
        return self._seconds_before + time.monotonic() - self._clock_start

    @property
    def epochs_done(self) -> float:
        """Epochs done, with the share of the current one."""
        return self.state.epoch + self.state.batch_in_epoch / max(len(self.sampler), 1)

    # ----------------------------------------------------------------------- validation
    def _validate(self) -> None:
        """Validate, update the early-stopping state and the plateau schedule, and write
        best.pt (if improved) and last.pt.

        Data-parallel: rank 0 validates while the others wait for its metrics; then every rank
        updates the same early-stopping and plateau state.
        """
        self._read_outcomes()
        state = self.state
        metrics = broadcast_object(self._validation_metrics() if self.world.is_main else {})
        metric = self.policy.metric
        improved = self.policy.record_validation(state, metrics[metric.value])
        self._log(
            logging.INFO,
            "step %d: %s%s",
            state.step,
            "  ".join(f"valid/{k}={v:.4g}" for k, v in sorted(metrics.items())),
            "  (new best)" if improved else "",
        )
        if self.world.is_main and self.evaluator is not None:
            log.info("valid: decoded %s", self.evaluator.decode_rate.summary())
        self.schedule.after_validation(metrics[metric.value])
        state.train_seconds = self._train_seconds()
        # best.pt before last.pt: a run killed between the two resumes from the previous
        # last.pt, repeats this step and rewrites best.pt with the same weights. The other
        # order could leave a last.pt whose best_step names a best.pt that was never written.
        if improved:
            self.checkpointer.save("best.pt", state)
        self.checkpointer.save("last.pt", state)
        if self.world.is_main:  # after the checkpoints: a callback may read them
            named = {f"valid/{name}": value for name, value in metrics.items()}
            self.callbacks.validation(state.step, self.epochs_done, named, self.model)

    def _validation_metrics(self) -> dict[str, float]:
        """Rank 0: the validation metrics, logged to TensorBoard, then the callback."""
        if self.evaluator is None:
            raise ValueError("the main process needs an evaluator to validate")
        step = self.state.step
        averaged = self.ema.swapped_in(self.model) if self.ema else contextlib.nullcontext()
        with preserved_rng(), averaged:
            metrics, _ = self.evaluator.evaluate(self.model)
            for name, value in metrics.items():
                self.writer.add_scalar(f"valid/{name}", value, step)
            if self.on_validation is not None:
                self.on_validation(self.model, step)
        self.writer.flush()
        return metrics

    def _log(self, level: int, message: str, *args: Any) -> None:
        """Log on rank 0 only (every rank takes the same decisions; one report is enough)."""
        if self.world.is_main:
            log.log(level, message, *args)


def training_module(
    model: torch.nn.Module,
    world: WorldInfo,
    device: torch.device,
    compile_model: bool,
    sampler: TokenBatchSampler,
) -> torch.nn.Module:
    """DDP averages gradients across ranks, and torch.compile wraps either.

    Raises:
        UserError: data-parallel, with fewer training batches than processes.
    """
    module = model
    if world.distributed:
        if sampler.global_len and len(sampler) == 0:
            raise UserError(
                f"the training data makes {sampler.global_len} batches, fewer than the "
                f"{world.world_size} processes; lower data.max_tokens or use fewer processes"
            )
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [device.index] if device.type == "cuda" else None
        module = DistributedDataParallel(module, device_ids=device_ids)
    if compile_model:
        module = compile_for_training(module)
    return module


def compile_for_training(module: torch.nn.Module) -> torch.nn.Module:
    """`torch.compile` for the training forward pass (Ansel et al. 2024, "PyTorch 2: Faster
    Machine Learning Through Dynamic Python Bytecode Transformation and Graph Compilation").

    dynamic=True: every batch has other lengths (S, T), and compiling shape-generic kernels
    from the start avoids one recompilation per new shape. A graph that fails to compile runs
    eagerly (`suppress_errors`), so a machine without a working C++/Triton tool chain trains as
    without compile, after a warning. Decoders that loop over target positions in Python (RNNs
    with attention feeding) gain little: each loop length is traced separately.
    """
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    return torch.compile(module, dynamic=True)
