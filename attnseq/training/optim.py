"""Optimizers and learning-rate schedules.

Schedules are multipliers of `optim.lr` applied per update (torch LambdaLR), so the peak lr is
always the configured one. With W = `optim.warmup_steps`, s the update number (1-based) and f the
share of the training budget used so far (`TrainingBudget`):

    constant      min(1, s / W)
    inverse_sqrt  min(s / W, sqrt(W / s))    Vaswani et al. 2017, eq. 3, rescaled so that it
                  peaks at 1 after W steps (the "Noam" shape)
    cosine        min(1, s / W) * 0.5 (1 + cos(pi f))    Loshchilov & Hutter 2017 (SGDR) without
                  restarts: from the peak down to 0 when the budget is spent
    linear        min(1, s / W) * (1 - f)    linear decay to 0 over the budget
    plateau       constant; the trainer multiplies lr by `plateau_factor` when validation stalls

The budget is whichever limit of the run comes first: `trainer.max_steps`, `trainer.max_epochs`
(in updates) or `trainer.max_minutes` (in training seconds), so `cosine` and `linear` reach 0
exactly when the run stops, also for a wall-clock budget, where they anneal by elapsed time (and
a resumed run continues from the saved time). A budget set by steps or epochs is deterministic.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnseq.config.schema import OptimConfig, OptimizerName, Scheduler


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if cfg.name is OptimizerName.adamw else torch.optim.Adam
    return cls(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)


@dataclass
class TrainingBudget:
    """How much of the run's budget is spent: the largest of its limits' shares.

    max_steps, max_epochs, max_seconds: the run's limits (None = no such limit).
    steps_per_epoch: set by the trainer once the batches are known (for `max_epochs`).
    fraction: the share used, in [0, 1], after `update`.
    """

    max_steps: int | None = None
    max_epochs: int | None = None
    max_seconds: float | None = None
    steps_per_epoch: int | None = None
    fraction: float = 0.0

    def update(self, steps: int, seconds: float) -> float:
        """Record `steps` updates done in `seconds` of training; returns the new fraction."""
        shares = [0.0]
        if self.max_steps:
            shares.append(steps / self.max_steps)
        if self.max_epochs and self.steps_per_epoch:
            shares.append(steps / (self.max_epochs * self.steps_per_epoch))
        if self.max_seconds:
            shares.append(seconds / self.max_seconds)
        self.fraction = min(max(shares), 1.0)
        return self.fraction


def lr_multiplier(cfg: OptimConfig, budget: TrainingBudget):
    """The schedule as a function of the (0-based) update number; cosine and linear also read
    `budget.fraction`, which the trainer updates before each scheduler step."""
    warmup = max(cfg.warmup_steps, 0)

    def multiplier(step: int) -> float:
        step = step + 1  # LambdaLR starts at 0; the first update is step 1
        warm = min(step / warmup, 1.0) if warmup else 1.0
        if cfg.scheduler is Scheduler.inverse_sqrt:
            return warm if warmup and step < warmup else math.sqrt(max(warmup, 1) / step)
        if cfg.scheduler is Scheduler.cosine:
            return warm * 0.5 * (1.0 + math.cos(math.pi * budget.fraction))
        if cfg.scheduler is Scheduler.linear:
            return warm * (1.0 - budget.fraction)
        return warm

    return multiplier


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, budget: TrainingBudget
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(cfg, budget))
