"""Optimizers and learning-rate schedules.

Schedules are multipliers of `optim.lr` applied per update (torch LambdaLR), so the peak lr is
always the configured one:

    constant      min(1, step / warmup)
    inverse_sqrt  min(step / warmup, sqrt(warmup / step))   Vaswani et al. 2017 eq. 3, rescaled
                  so that it peaks at 1 after `warmup` steps (the "Noam" shape)
    cosine        warm-up, then 0.5 (1 + cos(pi * progress)) down to 0 at the last step
    plateau       constant; the trainer multiplies lr by `plateau_factor` when validation stalls
"""

import math

import torch
from torch import nn

from attnseq.config import OptimConfig, OptimizerName, Scheduler


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    cls = torch.optim.AdamW if cfg.name is OptimizerName.adamw else torch.optim.Adam
    return cls(model.parameters(), lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)


def lr_multiplier(cfg: OptimConfig, total_steps: int | None):
    """The schedule as a function of the (0-based) update number."""
    warmup = max(cfg.warmup_steps, 0)

    def multiplier(step: int) -> float:
        step = step + 1  # LambdaLR starts at 0; the first update is step 1
        if warmup and step < warmup:
            return step / warmup
        if cfg.scheduler is Scheduler.inverse_sqrt:
            return math.sqrt(max(warmup, 1) / step)
        if cfg.scheduler is Scheduler.cosine and total_steps:
            progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return multiplier


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: OptimConfig, total_steps: int | None
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(cfg, total_steps))
