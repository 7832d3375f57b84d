"""The training loop: token-budget batches, Adam(W), clipping, lr schedule, periodic validation,
early stopping, TensorBoard scalars and atomic checkpoints (last.pt, best.pt).

Everything the loop needs arrives as objects (model, optimizer, data, an Evaluator); it knows
nothing about Hydra or how the pieces were chosen (tasks.py composes them).

The loss (loss.py) is normalised by the number of non-padding target tokens of the batch.
"""

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnseq.checkpoint import save_checkpoint
from attnseq.config import Metric, Scheduler, TrainConfig
from attnseq.data.batching import Batch, TokenBatchSampler, collate
from attnseq.evaluation import Evaluator
from attnseq.loss import sequence_loss
from attnseq.models.seq2seq import Seq2Seq
from attnseq.progress import TrainingProgress

log = logging.getLogger("attnseq")


@dataclass
class Progress:
    """Where training is; saved in every checkpoint so a run can resume exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    best_metric: float | None = None
    best_step: int = 0
    stale_validations: int = 0  # validations since the best one


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available, else cpu; asking for cuda without one is a user error."""
    if name == "cuda" and not torch.cuda.is_available():
        from attnseq.errors import UserError

        raise UserError("trainer.device=cuda but no CUDA device is available; use auto or cpu")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


class Trainer:
    """Runs the updates; validates and checkpoints along the way.

    Args:
        static_payload: checkpoint fields that never change during the run (config dict,
            tokenizer states), merged into every checkpoint.
        on_validation: called with (model, step) after each validation, e.g. to draw heatmaps.
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LambdaLR,
        cfg: TrainConfig,
        train_examples: list[tuple[list[int], list[int]]],
        evaluator: Evaluator,
        run_dir: Path,
        writer: Any,
        device: torch.device,
        static_payload: dict[str, Any],
        on_validation: Callable[[Seq2Seq, int], None] | None = None,
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
        self.metric: Metric = cfg.trainer.early_stopping_metric
        self.progress = Progress()
        self.sampler = TokenBatchSampler(
            [(len(src), len(tgt)) for src, tgt in train_examples],
            max_tokens=cfg.data.max_tokens,
            max_sentences=cfg.data.max_sentences,
            shuffle=True,
            seed=cfg.seed,
        )

    # ----------------------------------------------------------------------- main loop
    def fit(self) -> Progress:
        trainer_cfg = self.cfg.trainer
        batches_per_epoch = len(self.sampler.batches(0))
        total_steps = trainer_cfg.max_steps or trainer_cfg.max_epochs * batches_per_epoch
        log.info(
            "training: %d examples, %d batches per epoch (padding %.1f%% of positions), "
            "up to %d steps",
            len(self.examples),
            batches_per_epoch,
            100 * self.sampler.padding_share(0),
            total_steps,
        )
        deadline = (
            time.monotonic() + 60 * trainer_cfg.max_minutes if trainer_cfg.max_minutes else None
        )
        window = _ThroughputWindow()
        stop_reason = "max_epochs reached"
        with TrainingProgress(total_steps, self.progress.step, trainer_cfg.progress) as bar:
            while self.progress.epoch < trainer_cfg.max_epochs:
                batches = self.sampler.batches(self.progress.epoch)
                for indices in batches[self.progress.batch_in_epoch :]:
                    batch = collate(
                        [self.examples[i] for i in indices],
                        indices,
                        pad_id=self.model.pad_id,
                        bos_id=self.model.bos_id,
                        eos_id=self.model.eos_id,
                    ).to(self.device)
                    loss = self._update(batch)
                    self.progress.batch_in_epoch += 1
                    self.progress.step += 1
                    window.add(batch, loss)
                    bar.advance(loss, self.progress.epoch)
                    step = self.progress.step
                    if step % trainer_cfg.log_every == 0:
                        self._log_train(window.flush())
                    if step % trainer_cfg.validate_every == 0 and self._validate():
                        stop_reason = "early stopping"
                        break
                    if trainer_cfg.max_steps and step >= trainer_cfg.max_steps:
                        stop_reason = "max_steps reached"
                        break
                    if deadline and time.monotonic() >= deadline:
                        stop_reason = "max_minutes reached"
                        break
                else:
                    self.progress.epoch += 1
                    self.progress.batch_in_epoch = 0
                    continue
                break
        if self.progress.step % trainer_cfg.validate_every != 0:
            self._validate()  # the final state is always validated and checkpointed
        log.info("training stopped after %d steps: %s", self.progress.step, stop_reason)
        return self.progress

    def _update(self, batch: Batch) -> float:
        self.model.train()
        output = self.model(batch.src, batch.src_lengths, batch.tgt_in)
        loss_sum, n_tokens = sequence_loss(
            output.logits, batch.tgt_out, self.model.pad_id, self.cfg.optim.label_smoothing
        )
        loss = loss_sum / max(n_tokens, 1)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.optim.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach())

    # ----------------------------------------------------------------------- validation
    def _validate(self) -> bool:
        """Validate, checkpoint, and return True when early stopping says stop."""
        step = self.progress.step
        metrics, _ = self.evaluator.evaluate(self.model)
        for name, value in metrics.items():
            self.writer.add_scalar(f"valid/{name}", value, step)
        if self.on_validation is not None:
            self.on_validation(self.model, step)
        self.writer.flush()
        value = metrics[self.metric.value]
        improved = self.progress.best_metric is None or (
            value > self.progress.best_metric
            if self.metric.higher_is_better
            else value < self.progress.best_metric
        )
        log.info(
            "step %d: %s%s",
            step,
            "  ".join(f"valid/{k}={v:.4g}" for k, v in sorted(metrics.items())),
            "  (new best)" if improved else "",
        )
        if improved:
            self.progress.best_metric, self.progress.best_step = value, step
            self.progress.stale_validations = 0
        else:
            self.progress.stale_validations += 1
            self._maybe_reduce_lr()
        self.save("last.pt")
        if improved:
            self.save("best.pt")
        patience = self.cfg.trainer.early_stopping_patience
        target = self.cfg.trainer.early_stopping_target
        if target is not None and (
            value >= target if self.metric.higher_is_better else value <= target
        ):
            log.info("valid/%s reached the target %.4g", self.metric.value, target)
            return True
        return bool(patience) and self.progress.stale_validations >= patience

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
            log.info("plateau: learning rate reduced to %.3g", self.optimizer.param_groups[0]["lr"])

    def _log_train(self, stats: dict[str, float]) -> None:
        step = self.progress.step
        for name, value in stats.items():
            self.writer.add_scalar(f"train/{name}", value, step)
        self.writer.add_scalar("train/lr", self.optimizer.param_groups[0]["lr"], step)

    # ----------------------------------------------------------------------- checkpoints
    def state_payload(self) -> dict[str, Any]:
        rng: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            **self.static_payload,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "progress": vars(self.progress).copy(),
            "rng": rng,
        }

    def save(self, name: str) -> Path:
        path = self.checkpoint_dir / name
        save_checkpoint(path, self.state_payload())
        return path


class _ThroughputWindow:
    """Loss and tokens/s averaged over the steps since the last train/* log line."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.loss_sum = 0.0
        self.steps = 0
        self.src_tokens = 0
        self.tgt_tokens = 0
        self.padded = 0

    def add(self, batch: Batch, loss: float) -> None:
        self.loss_sum += loss
        self.steps += 1
        self.src_tokens += batch.n_src_tokens
        self.tgt_tokens += batch.n_tgt_tokens
        self.padded += batch.n_padded_tokens

    def flush(self) -> dict[str, float]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        real = self.src_tokens + self.tgt_tokens
        stats = {
            "loss": self.loss_sum / max(self.steps, 1),
            "tokens_per_sec": self.tgt_tokens / seconds,  # target tokens, the peers' unit
            "src_tgt_tokens_per_sec": real / seconds,
            "padding_share": 1.0 - real / max(self.padded, 1),
        }
        stats["ppl"] = math.exp(min(stats["loss"], 100.0))
        self.__init__()
        return stats
