"""The training loop: token-budget batches, Adam(W), clipping, lr schedule, periodic validation,
early stopping, TensorBoard scalars, a log line every `trainer.log_every` updates (step, epoch,
loss, ppl, lr, target tokens/s, gradient norm, elapsed time, ETA) and atomic checkpoints
(last.pt, best.pt).

Everything the loop needs arrives as objects (model, optimizer, data, an Evaluator); it knows
nothing about Hydra or how the pieces were chosen (tasks.py composes them).

The loss (loss.py) is normalised by the number of non-padding target tokens of the batch.

Reliability (what a run that dies can count on):

- Resume is exact. A checkpoint is written at a step boundary and holds everything the next step
  depends on: weights, optimizer and scheduler state, `Progress` (step, epoch, batch position,
  early-stopping state) and the RNG states. Batches are a pure function of (seed, epoch), so
  (epoch, batch_in_epoch) is the whole data-order state. Nothing between two steps draws random
  numbers except what is saved (validation runs under `preserved_rng`), so on CPU a run resumed
  from any checkpoint ends with the same weights as a run that never stopped.
- SIGINT/SIGTERM (`StopSignals`) let the current step finish, write last.pt and raise
  `TrainingInterrupted`; a second SIGINT stops at once (atomic writes leave no half file).
- A non-finite loss or gradient skips its update (counted in train/skipped_steps);
  `trainer.max_nonfinite_steps` of them in a row raise `TrainingDiverged` without writing any
  checkpoint, so last.pt and best.pt keep the last good state.

Speed (GPU mostly): `trainer.precision` (mixed_precision.py: bf16/fp16 autocast, fp16 loss
scaling), `trainer.compile` (torch.compile of the training forward pass; validation and decoding
stay eager), `trainer.num_workers` and `trainer.pin_memory` (data/loader.py: batches collated ahead
in worker processes, page-locked and copied asynchronously). An fp16 step whose gradients
overflow is skipped and lowers the loss scale: expected behaviour, counted in
train/overflow_steps, not as divergence.

Data parallelism (torchrun, see distributed.py): inside a process group of N ranks the model is
wrapped in DistributedDataParallel and every rank takes its own share of each epoch's batches.
The global update equals a single-process update on the union of the N batches: the target token
count is summed over ranks first and each rank's summed loss is scaled by N / global tokens
(DDP averages the gradients, so the N cancels). The loss, the skip decision (non-finite loss or
gradient on any rank), the signal requests and rank 0's clock (max_minutes, periodic saves) are
combined in one small all-reduce per step, and validation metrics are broadcast from rank 0, so
every rank takes the same decisions and stops at the same step. Only rank 0 writes. Each rank's
RNG state is saved, so resuming with the same number of processes is exact too.
"""

import contextlib
import logging
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from attnseq.config.schema import Metric, Scheduler, TrainConfig
from attnseq.data.batching import Batch, TokenBatchSampler
from attnseq.data.extended_vocab import ExtendedExample
from attnseq.data.loader import BatchLoader, TokenCounts
from attnseq.evaluation.evaluator import Evaluator
from attnseq.io.atomic import remove_stale_temporaries
from attnseq.io.checkpoint import keep_step_checkpoint, save_checkpoint
from attnseq.io.progress import ON_BAR, TrainingProgress
from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.distributed import all_gather_object, all_reduce_sum, broadcast_object, world
from attnseq.training.loss import coverage_term, sequence_loss
from attnseq.training.optim import TrainingBudget
from attnseq.training.precision import MixedPrecision
from attnseq.training.rng import preserved_rng, rng_state, set_rng_state
from attnseq.training.signals import StopSignals, TrainingInterrupted

__all__ = [
    "NullWriter",
    "Progress",
    "StopSignals",
    "Trainer",
    "TrainingDiverged",
    "TrainingInterrupted",
    "resolve_device",
]

log = logging.getLogger("attnseq")


@dataclass
class Progress:
    """Where training is; saved in every checkpoint so a run can resume exactly.

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
    def from_dict(cls, values: dict[str, Any]) -> "Progress":
        """From a checkpoint's `progress`; keys an older checkpoint lacks keep their default."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})


class TrainingDiverged(Exception):
    """Too many non-finite losses (or gradients) in a row; no checkpoint was overwritten."""


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; asking for cuda without one is a user error."""
    if name == "cuda" and not torch.cuda.is_available():
        from attnseq.errors import UserError

        raise UserError("trainer.device=cuda but no CUDA device is available; use auto or cpu")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


class NullWriter:
    """Stands in for a SummaryWriter where nothing may be written (ranks other than 0): every
    method call is accepted and does nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


# ------------------------------------------------------------------------------ trainer
class Trainer:
    """Runs the updates; validates and checkpoints along the way.

    Inside an initialised process group (distributed.py) it trains data-parallel: see the module
    docstring. Ranks other than 0 write nothing and do not validate; they may pass
    `evaluator=None` and a `NullWriter`.

    Args:
        evaluator: the validation split's evaluator (used on rank 0 only).
        static_payload: checkpoint fields that never change during the run (config dict,
            tokenizer states), merged into every checkpoint.
        on_validation: called with (model, step) after each validation, e.g. to draw heatmaps
            (rank 0 only).
        stop: the run's signal handling; without it SIGINT/SIGTERM keep their default effect.
        budget: the budget the lr schedule anneals over (optim.py); the trainer keeps it up to
            date. Without one, it is made from the config (for a schedule that ignores it).
        extended_examples: copy models: the extended-vocabulary view of every training example
            (attnseq/data/extended_vocab.py), aligned with `train_examples`.
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LambdaLR,
        cfg: TrainConfig,
        train_examples: list[tuple[list[int], list[int]]],
        evaluator: Evaluator | None,
        run_dir: Path,
        writer: Any,
        device: torch.device,
        static_payload: dict[str, Any],
        on_validation: Callable[[Seq2Seq, int], None] | None = None,
        stop: StopSignals | None = None,
        budget: TrainingBudget | None = None,
        extended_examples: list[ExtendedExample] | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.cfg = cfg
        self.examples = train_examples
        self.evaluator = evaluator
        self.checkpoint_dir = run_dir / "checkpoints"
        self.writer = writer
        self.device = device
        self.static_payload = static_payload
        self.on_validation = on_validation
        self.stop = stop
        self.metric: Metric = cfg.trainer.early_stopping_metric
        self.progress = Progress()
        self.last_saved_step: int | None = None  # step of the newest last.pt written here
        self._resume_rng: dict[str, Any] | None = None
        self.skip_reason = ""  # why the latest update was skipped (non-finite loss or gradient)
        minutes = cfg.trainer.max_minutes
        self.budget = budget or TrainingBudget(
            cfg.trainer.max_steps, cfg.trainer.max_epochs, 60 * minutes if minutes else None
        )
        self._last_save = time.monotonic()
        self._clock_start = time.monotonic()
        self._seconds_before = 0.0
        self.world = world()
        self.progress.world_size = self.world.world_size
        if not self.world.is_main:
            self.writer = NullWriter()  # only rank 0 writes
        self.sampler = TokenBatchSampler(
            [(len(src), len(tgt)) for src, tgt in train_examples],
            max_tokens=cfg.data.max_tokens,
            max_sentences=cfg.data.max_sentences,
            shuffle=True,
            seed=cfg.seed,
            num_replicas=self.world.world_size,
            rank=self.world.rank,
        )
        self.budget.steps_per_epoch = len(self.sampler)
        trainer_cfg = cfg.trainer
        self.precision = MixedPrecision(trainer_cfg.precision.name, device)
        self.loader = BatchLoader(
            train_examples,
            pad_id=model.pad_id,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
            device=device,
            num_workers=trainer_cfg.num_workers,
            pin_memory=trainer_cfg.pin_memory,
            extended=extended_examples,
        )
        # The module the updates run through: DDP averages gradients across ranks, and
        # torch.compile wraps either. Everything else (validation, decoding, state_dict, pad
        # ids) uses the bare model, so checkpoints hold plain parameter names.
        self.train_model: torch.nn.Module = model
        if self.world.distributed:
            if train_examples and len(self.sampler) == 0:
                from attnseq.errors import UserError

                raise UserError(
                    f"the training data makes {self.sampler.global_len} batches, fewer than the "
                    f"{self.world.world_size} processes; lower data.max_tokens or use fewer "
                    "processes"
                )
            from torch.nn.parallel import DistributedDataParallel

            self.train_model = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
        if trainer_cfg.compile:
            self.train_model = compile_for_training(self.train_model)
        self._global_counts = (0.0, 0.0, 0.0)  # (src, tgt, padded) tokens of the latest step
        self._grad_norm = 0.0  # gradient norm of the latest step, before clipping
        self._session_start_step = 0  # progress.step when this process's fit began
        if self.world.is_main:
            remove_stale_temporaries(self.checkpoint_dir)

    def restore(self, payload: dict[str, Any]) -> None:
        """Continue from a checkpoint: weights, optimizer, scheduler, progress and RNG.

        The RNG states are applied at the start of `fit`, right before the first step, so that
        whatever is built in between (it draws from the same generator) cannot shift them.
        """
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        # LambdaLR's state holds base_lrs (lowered by plateau reductions) and its step count.
        self.scheduler.load_state_dict(payload["scheduler"])
        self.progress = Progress.from_dict(payload["progress"])
        self.precision.load_state_dict(payload.get("grad_scaler", {}))
        self._resume_rng = payload["rng"]
        ranks_rng = payload.get("rng_ranks")
        world_size = self.world.world_size
        if ranks_rng is not None and len(ranks_rng) == world_size:
            self._resume_rng = ranks_rng[self.world.rank]
        saved_world = self.progress.world_size
        if saved_world != world_size:
            # Step k of R ranks covers batches k*R .. k*R+R-1 of the epoch's global order, so the
            # consumed prefix converts; rounding down repeats fewer than R batches at most.
            consumed = self.progress.batch_in_epoch * saved_world
            self.progress.batch_in_epoch = consumed // world_size
            self.progress.world_size = world_size
            if self.world.is_main:
                log.warning(
                    "resuming a run of %d process(es) with %d: the data order continues from "
                    "batch %d of the epoch, but differs from a run that never stopped",
                    saved_world,
                    world_size,
                    consumed,
                )

    # ----------------------------------------------------------------------- main loop
    def fit(self) -> Progress:
        """Train until a limit is reached; returns the final progress.

        Raises:
            TrainingInterrupted: a SIGINT/SIGTERM arrived (last.pt holds the last step).
            TrainingDiverged: `trainer.max_nonfinite_steps` non-finite losses in a row.
        """
        trainer_cfg = self.cfg.trainer
        progress = self.progress
        batches_per_epoch = len(self.sampler)  # the same in every epoch
        total_steps = trainer_cfg.max_epochs * batches_per_epoch
        if trainer_cfg.max_steps:
            total_steps = min(total_steps, trainer_cfg.max_steps)
        main = self.world.is_main
        if main:
            log.info(
                "training: %d examples, %d batches per epoch%s (padding %.1f%% of positions), "
                "up to %d steps",
                len(self.examples),
                batches_per_epoch,
                f" on each of {self.world.world_size} processes" if self.world.distributed else "",
                100 * self.sampler.padding_share(0),
                total_steps,
            )
        if main and (progress.step or progress.batch_in_epoch or progress.epoch):
            log.info(
                "resuming at step %d (epoch %d, batch %d of %d)",
                progress.step,
                progress.epoch + 1,
                progress.batch_in_epoch,
                batches_per_epoch,
            )
        # RNG boundary: the stream continues exactly where the checkpoint's step left it.
        if self._resume_rng is not None:
            set_rng_state(self._resume_rng)
        self._clock_start = self._last_save = time.monotonic()
        self._seconds_before = progress.train_seconds
        self._session_start_step = progress.step
        window = _ThroughputWindow()
        stop_reason = self._limit_reached()
        if main and stop_reason is not None and progress.step:
            log.info("nothing left to train: %s", stop_reason)
        graceful = self.stop.graceful() if self.stop is not None else contextlib.nullcontext()
        show_bar = trainer_cfg.progress and main
        with graceful, TrainingProgress(total_steps, progress.step, show_bar) as bar:
            epoch, batches = -1, []
            upcoming = iter(())  # this epoch's batches from batch_in_epoch on, as tensors
            while stop_reason is None:
                if epoch != progress.epoch:
                    epoch, batches = progress.epoch, self.sampler.batches(progress.epoch)
                    upcoming = self.loader(batches[progress.batch_in_epoch :])
                if progress.batch_in_epoch >= len(batches):  # a checkpoint at an epoch's end
                    progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
                    stop_reason = self._limit_reached()
                    continue
                batch, counts = next(upcoming)  # batches[progress.batch_in_epoch]
                loss = self._update(batch, counts)
                progress.batch_in_epoch += 1
                if progress.batch_in_epoch == len(batches):
                    progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
                saved = False
                if loss is None:
                    if self.skip_reason:  # not an fp16 overflow (those only lower the scale)
                        self._skipped(self.skip_reason)  # raises TrainingDiverged after too many
                else:
                    progress.nonfinite_in_a_row = 0
                    progress.step += 1
                    window.add(*self._global_counts, loss, self._grad_norm)
                    lr = self.optimizer.param_groups[0]["lr"]
                    bar.advance(loss, progress.epoch, self._global_counts[1], lr)
                    if progress.step % trainer_cfg.log_every == 0:
                        self._log_train(window.flush(), total_steps)
                    if progress.step % trainer_cfg.validate_every == 0:
                        self._validate()
                        saved = True
                stop_requested, save_due = self._sync_decisions()
                stop_reason = self._limit_reached()
                if loss is not None and not saved and stop_reason is None and save_due:
                    self.save("last.pt")
                    saved = True
                if stop_requested:
                    if not saved:
                        self.save("last.pt")
                    self._interrupted()
            if progress.validated_step != progress.step:
                self._validate()  # the final state is always validated and checkpointed
            if self._sync_decisions()[0]:
                self._interrupted()  # arrived during the final validation; last.pt is written
        if main:
            log.info("training stopped after %d steps: %s", progress.step, stop_reason)
        return progress

    def _sync_decisions(self) -> tuple[bool, bool]:
        """(stop requested, periodic save due) after a step; updates `progress.train_seconds`.

        Data-parallel: one all-reduce makes both the same on every rank, a signal that reached
        any rank stops them all, and rank 0's clock (the only one whose time is saved) decides
        max_minutes and save_every_minutes.
        """
        seconds = self._train_seconds()
        requested = self.stop is not None and self.stop.requested
        if not self.world.distributed:
            self.progress.train_seconds = seconds
            return requested, self._save_due()
        main = self.world.is_main
        seconds, save_due, requests = all_reduce_sum(
            [seconds if main else 0.0, float(main and self._save_due()), float(requested)]
        )
        self.progress.train_seconds = seconds
        return requests > 0, save_due > 0

    def _update(self, batch: Batch, counts: TokenCounts) -> float | None:
        """One optimizer update; returns the loss (data-parallel: of the global batch).

        When the loss or the gradient norm is not finite (on any rank) the update is skipped
        (weights, optimizer and scheduler untouched): the result is None and `skip_reason` says
        why.
        """
        distributed = self.world.distributed
        totals = [float(counts.src), float(counts.tgt), float(counts.padded)]
        if distributed:  # the global token count normalises the loss, so it comes first
            totals = all_reduce_sum(totals)
        self._global_counts = (totals[0], totals[1], totals[2])
        self.train_model.train()  # DDP's wrapper and the model inside
        with self.precision.autocast():
            output = self.train_model(
                batch.src, batch.src_lengths, batch.tgt_in, **batch.copy_inputs()
            )
            loss_sum, _ = sequence_loss(
                output.logits, batch.tgt_out, self.model.pad_id, self.cfg.optim.label_smoothing
            )
            if "coverage_loss" in output.extras:  # See et al. 2017, eq. 13: + lambda * covloss_t
                optim = self.cfg.optim
                # See et al. add the coverage loss for a last phase of training only
                weight = (
                    optim.coverage_lambda if self.progress.step >= optim.coverage_start_step else 0
                )
                loss_sum = loss_sum + coverage_term(
                    output.extras["coverage_loss"], batch.tgt_out, self.model.pad_id, weight
                )
        # DDP averages gradients over the R ranks: R * sum_r / N_global averages to
        # sum(all ranks' token losses) / N_global, the single-process loss of the union.
        if distributed:
            loss = loss_sum * (self.world.world_size / max(totals[1], 1.0))
        else:
            loss = loss_sum / max(totals[1], 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        self.precision.backward(loss)
        self.precision.unscale(self.optimizer)  # fp16: clip and check the true gradients
        if self.cfg.optim.clip_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.clip_norm)
        else:
            norm = torch.nn.utils.get_total_norm(
                [p.grad for p in self.model.parameters() if p.grad is not None]
            )
        # Both numbers in one host-device synchronisation, before the optimizer step it decides.
        loss_value, norm_value = torch.stack([loss.detach().float(), norm.float()]).tolist()
        self._grad_norm = norm_value  # before clipping
        if distributed:
            # The gradients (so their norm) are already the same everywhere; the losses and any
            # rank's non-finite value are summed so every rank takes the same decision.
            local_sum = float(loss_sum.detach())
            total, bad_loss, bad_norm = all_reduce_sum(
                [
                    local_sum if math.isfinite(local_sum) else 0.0,
                    float(not math.isfinite(local_sum)),
                    float(not math.isfinite(norm_value)),
                ]
            )
            loss_value = total / max(totals[1], 1.0) if not bad_loss else math.nan
            norm_value = norm_value if not bad_norm else math.inf
        if (
            math.isfinite(loss_value)
            and not math.isfinite(norm_value)
            and self.precision.scales_loss
        ):
            scale = self.precision.skip_overflow()
            self.progress.overflow_steps += 1
            self.writer.add_scalar(
                "train/overflow_steps", self.progress.overflow_steps, self.progress.step
            )
            self.writer.add_scalar("train/loss_scale", scale, self.progress.step)
            self.optimizer.zero_grad(set_to_none=True)
            self.skip_reason = ""  # an expected fp16 overflow, not a sign of divergence
            return None
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
            self.skip_reason = (
                f"loss {loss_value}"
                if not math.isfinite(loss_value)
                else f"gradient norm {norm_value}"
            )
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.precision.step(self.optimizer)
        # The lr of the next update: the budget as it stands after this one. Seconds are those
        # of the previous step's end (the value all data-parallel ranks share).
        self.budget.update(self.progress.step + 1, self.progress.train_seconds)
        self.scheduler.step()
        return loss_value

    def _skipped(self, problem: str) -> None:
        """Count a skipped update; stop the run after `max_nonfinite_steps` in a row."""
        progress = self.progress
        progress.skipped_steps += 1
        progress.nonfinite_in_a_row += 1
        self.writer.add_scalar("train/skipped_steps", progress.skipped_steps, progress.step)
        limit = self.cfg.trainer.max_nonfinite_steps
        self._log(
            logging.WARNING,
            "after step %d: non-finite %s; update skipped (%d in a row, %d in total; "
            "the run stops at %d in a row)",
            progress.step,
            problem,
            progress.nonfinite_in_a_row,
            progress.skipped_steps,
            limit,
        )
        if progress.nonfinite_in_a_row < limit:
            return
        self.writer.flush()
        # No checkpoint is written here: the files on disk are the last good state.
        kept = (
            f"{self.checkpoint_dir / 'last.pt'} is from step {self.last_saved_step}"
            if self.last_saved_step is not None
            else f"no checkpoint of this session was written; {self.checkpoint_dir} keeps "
            "whatever it held before"
        )
        raise TrainingDiverged(
            f"training diverged: {progress.nonfinite_in_a_row} non-finite losses or gradients "
            f"in a row after step {progress.step} (trainer.max_nonfinite_steps={limit}); "
            f"those updates were skipped and no checkpoint was overwritten ({kept}). "
            "Lower optim.lr, use more optim.warmup_steps or gradient clipping "
            "(optim.clip_norm), or check the data"
        )

    def _interrupted(self) -> None:
        # Data-parallel: a signal to any rank stops all; one that got none reports SIGTERM.
        signum = self.stop.signum if self.stop is not None else None
        signum = signum if signum is not None else signal.SIGTERM
        if self.world.is_main:
            log.warning(
                "stopped by %s after step %d; %s written",
                signal.Signals(signum).name,
                self.progress.step,
                self.checkpoint_dir / "last.pt",
            )
        raise TrainingInterrupted(signum, graceful=True, step=self.last_saved_step)

    def _train_seconds(self) -> float:
        return self._seconds_before + time.monotonic() - self._clock_start

    def _limit_reached(self) -> str | None:
        """Why training should stop now, or None. Also true of a resumed run whose checkpoint
        was written when it had already stopped, so resuming a finished run trains nothing."""
        trainer_cfg, progress = self.cfg.trainer, self.progress
        if trainer_cfg.max_steps and progress.step >= trainer_cfg.max_steps:
            return "max_steps reached"
        if progress.epoch >= trainer_cfg.max_epochs:
            return "max_epochs reached"
        if trainer_cfg.max_minutes and progress.train_seconds >= 60 * trainer_cfg.max_minutes:
            return "max_minutes reached"
        target, best = trainer_cfg.early_stopping_target, progress.best_metric
        if (
            target is not None
            and best is not None
            and (best >= target if self.metric.higher_is_better else best <= target)
        ):
            return f"valid/{self.metric.value} reached the target {target:.4g}"
        if best is not None and best == self.metric.best_possible:
            # Validation cannot improve on its ceiling: more updates cannot change best.pt.
            return f"valid/{self.metric.value} reached its best possible value {best:.4g}"
        patience = trainer_cfg.early_stopping_patience
        if patience and progress.stale_validations >= patience:
            return "early stopping"
        return None

    def _save_due(self) -> bool:
        """A periodic resume point: every `save_every_steps` updates or `save_every_minutes`."""
        trainer_cfg = self.cfg.trainer
        every = trainer_cfg.save_every_steps
        if every and self.progress.step % every == 0:
            return True
        minutes = trainer_cfg.save_every_minutes
        return bool(minutes) and time.monotonic() - self._last_save >= 60 * minutes

    # ----------------------------------------------------------------------- validation
    def _validate(self) -> None:
        """Validate, update the early-stopping state and write best.pt (if improved), last.pt.

        Data-parallel: rank 0 validates while the others wait for its metrics; then every rank
        updates the same early-stopping and plateau state.
        """
        progress = self.progress
        step = progress.step
        main = self.world.is_main
        metrics: dict[str, float] = {}
        if main:
            if self.evaluator is None:
                raise ValueError("the main process needs an evaluator to validate")
            with preserved_rng():
                metrics, _ = self.evaluator.evaluate(self.model)
                for name, value in metrics.items():
                    self.writer.add_scalar(f"valid/{name}", value, step)
                if self.on_validation is not None:
                    self.on_validation(self.model, step)
            self.writer.flush()
        metrics = broadcast_object(metrics)
        value = metrics[self.metric.value]
        improved = progress.best_metric is None or (
            value > progress.best_metric
            if self.metric.higher_is_better
            else value < progress.best_metric
        )
        self._log(
            logging.INFO,
            "step %d: %s%s",
            step,
            "  ".join(f"valid/{k}={v:.4g}" for k, v in sorted(metrics.items())),
            "  (new best)" if improved else "",
        )
        if main and self.evaluator is not None:
            log.info("valid: decoded %s", self.evaluator.decode_rate.summary())
        progress.validated_step = step
        if improved:
            progress.best_metric, progress.best_step = value, step
            progress.stale_validations = 0
        else:
            progress.stale_validations += 1
            self._maybe_reduce_lr()
        progress.train_seconds = self._train_seconds()
        # best.pt before last.pt: a run killed between the two resumes from the previous
        # last.pt, repeats this step and rewrites best.pt with the same weights. The other
        # order could leave a last.pt whose best_step names a best.pt that was never written.
        if improved:
            self.save("best.pt")
        self.save("last.pt")

    def _maybe_reduce_lr(self) -> None:
        optim = self.cfg.optim
        if optim.scheduler is not Scheduler.plateau:
            return
        if self.progress.stale_validations % optim.plateau_patience == 0:
            self.scheduler.base_lrs = [lr * optim.plateau_factor for lr in self.scheduler.base_lrs]
            for group, lr in zip(
                self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True
            ):
                group["lr"] = lr * optim.plateau_factor
            self._log(
                logging.INFO,
                "plateau: learning rate reduced to %.3g",
                self.optimizer.param_groups[0]["lr"],
            )

    def _log(self, level: int, message: str, *args: Any) -> None:
        """Log on rank 0 only (every rank takes the same decisions; one report is enough)."""
        if self.world.is_main:
            log.log(level, message, *args)

    def _log_train(self, stats: dict[str, float], total_steps: int) -> None:
        """train/* scalars and one log line (train.log, a redirected stdout) per interval."""
        step = self.progress.step
        lr = self.optimizer.param_groups[0]["lr"]
        for name, value in stats.items():
            self.writer.add_scalar(f"train/{name}", value, step)
        self.writer.add_scalar("train/lr", lr, step)
        if not self.world.is_main:
            return
        elapsed = self._train_seconds()
        eta = self._eta_seconds(total_steps, elapsed)
        log.info(
            "step %d/%d  epoch %.2f  loss %.4f  ppl %.2f  lr %.3g  %s tgt tok/s  grad norm %.3g  "
            "elapsed %s  ETA %s",
            step,
            total_steps,
            self.progress.epoch + self.progress.batch_in_epoch / max(len(self.sampler), 1),
            stats["loss"],
            stats["ppl"],
            lr,
            f"{stats['tokens_per_sec']:,.0f}",
            stats["grad_norm"],
            _clock(elapsed),
            "-" if eta is None else _clock(eta),
            extra={ON_BAR: True},  # the live bar shows these numbers on a terminal
        )

    def _eta_seconds(self, total_steps: int, elapsed: float) -> float | None:
        """Seconds until the budget that binds first: the steps left (max_steps or max_epochs)
        at this session's pace, or what is left of max_minutes."""
        done = self.progress.step - self._session_start_step
        session_seconds = time.monotonic() - self._clock_start
        estimates = []
        if done > 0 and session_seconds > 0:
            estimates.append(max(total_steps - self.progress.step, 0) * session_seconds / done)
        minutes = self.cfg.trainer.max_minutes
        if minutes:
            estimates.append(max(60 * minutes - elapsed, 0.0))
        return min(estimates, default=None)

    # ----------------------------------------------------------------------- checkpoints
    def state_payload(self) -> dict[str, Any]:
        """Everything a resumed run needs. Reading these states draws no random numbers, so
        saving (periodically or not) leaves the training stream untouched.

        Data-parallel: a collective (every rank's RNG state is gathered into `rng_ranks`), so
        every rank calls it at the same point.
        """
        payload = {
            **self.static_payload,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "progress": vars(self.progress).copy(),
            "rng": rng_state(),
            "grad_scaler": self.precision.state_dict(),
        }
        if self.world.distributed:
            payload["rng_ranks"] = all_gather_object(payload["rng"])
        return payload

    def save(self, name: str) -> Path:
        """Write checkpoints/NAME atomically; refuses (TrainingDiverged) to write weights that
        are not finite, so a checkpoint on disk is always a usable model. With
        trainer.keep_last, each last.pt is also kept as step_STEP.pt (checkpoint.py).

        Data-parallel: called by every rank at the same step (the weights are the same on all,
        so all take the same decision); only rank 0 writes.
        """
        if not _all_finite(self.model.parameters()):
            raise TrainingDiverged(
                f"the weights became non-finite after step {self.progress.step}; {name} was not "
                f"written (last.pt is from step {self.last_saved_step}). Lower optim.lr or use "
                "gradient clipping (optim.clip_norm)"
            )
        path = self.checkpoint_dir / name
        payload = self.state_payload()
        if self.world.is_main:
            save_checkpoint(path, payload)
            keep = self.cfg.trainer.keep_last
            if name == "last.pt" and keep:
                keep_step_checkpoint(path, self.progress.step, keep)
        if name == "last.pt":
            self.last_saved_step = self.progress.step
            self._last_save = time.monotonic()
        return path


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


def _all_finite(tensors: Any) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors]
    return bool(torch.stack(flags).all()) if flags else True


class _ThroughputWindow:
    """Loss and tokens/s averaged over the steps since the last train/* log line."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.loss_sum = 0.0
        self.norm_sum = 0.0
        self.steps = 0
        self.src_tokens = 0
        self.tgt_tokens = 0
        self.padded = 0

    def add(
        self, src_tokens: float, tgt_tokens: float, padded: float, loss: float, norm: float
    ) -> None:
        """One step: its (global) real source and target tokens, padded positions, loss and
        gradient norm."""
        self.loss_sum += loss
        self.norm_sum += norm
        self.steps += 1
        self.src_tokens += src_tokens
        self.tgt_tokens += tgt_tokens
        self.padded += padded

    def flush(self) -> dict[str, float]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        real = self.src_tokens + self.tgt_tokens
        stats = {
            "loss": self.loss_sum / max(self.steps, 1),
            "tokens_per_sec": self.tgt_tokens / seconds,  # target tokens, the peers' unit
            "src_tgt_tokens_per_sec": real / seconds,
            "padding_share": 1.0 - real / max(self.padded, 1),
            "grad_norm": self.norm_sum / max(self.steps, 1),
        }
        stats["ppl"] = math.exp(min(stats["loss"], 100.0))
        self.__init__()
        return stats


def _clock(seconds: float) -> str:
    """H:MM:SS."""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
