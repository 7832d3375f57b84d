"""The optimizer, with weight decay on weight matrices only (as nanoGPT's
`configure_optimizers`), and its learning-rate schedule over the run's budget."""

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau

from attnseq.config.choices import OptimizerName, Scheduler
from attnseq.config.schema import OptimConfig, TrainerConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight matrices with `weight_decay`, every other parameter without."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """Adam or AdamW over `parameter_groups`, fused where torch has the fused kernel for the
    parameters' device (CUDA, CPU, MPS): one kernel per step instead of one per tensor, and the
    device-side skip the training step uses (`found_inf`, precision.py), so that deciding to
    skip a non-finite update needs no host-device synchronisation. Build it after the model
    has moved to its device."""
    cls = torch.optim.AdamW if cfg.name is OptimizerName.adamw else torch.optim.Adam
    groups = parameter_groups(model, cfg.weight_decay)
    devices = {p.device.type for group in groups for p in group["params"]}
    fused = devices <= FUSED_DEVICES
    return cls(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=fused or None)


# the device types torch's fused Adam/AdamW kernels run on
FUSED_DEVICES = {"cuda", "cpu", "mps", "xpu"}


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict, model: nn.Module) -> None:
    """Load a checkpoint's optimizer state, keeping how this optimizer runs (fused or not):
    `load_state_dict` takes every group option from the file, and a state saved by an unfused
    optimizer would otherwise turn the fused kernel, and with it the device-side skip, off."""
    modes = [{key: group.get(key) for key in RUN_MODES} for group in optimizer.param_groups]
    optimizer.load_state_dict(regroup_state(state, model))
    for group, mode in zip(optimizer.param_groups, modes, strict=True):
        group.update(mode)


# group options that say how the step runs, not what it computes
RUN_MODES = ("fused", "foreach", "capturable")


def regroup_state(state: dict, model: nn.Module) -> dict:
    """An optimizer state dict saved with all parameters in one group, regrouped as
    `parameter_groups` orders them, so a run saved that way resumes. Other states pass as they
    are."""
    if len(state["param_groups"]) != 1:
        return state
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [i for i, p in enumerate(trainable) if p.dim() >= 2]
    order = decay + [i for i, p in enumerate(trainable) if p.dim() < 2]
    new_index = {old: new for new, old in enumerate(order)}
    group = state["param_groups"][0]
    groups = [
        {**group, "params": list(range(len(decay)))},
        {**group, "weight_decay": 0.0, "params": list(range(len(decay), len(order)))},
    ]
    return {
        "state": {new_index[old]: value for old, value in state["state"].items()},
        "param_groups": groups,
    }


log = logging.getLogger("attnseq")


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

    @classmethod
    def for_run(cls, trainer: TrainerConfig) -> "TrainingBudget":
        """The budget of a run with these trainer settings (batches per epoch still unknown)."""
        minutes = trainer.max_minutes
        return cls(trainer.max_steps, trainer.max_epochs, 60 * minutes if minutes else None)

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


def lr_multiplier(cfg: OptimConfig, budget: TrainingBudget) -> Callable[[int], float]:
    """The schedule as a function of the (0-based) update number: a multiplier of `optim.lr`,
    so the peak lr is always the configured one. With W = `optim.warmup_steps`, s the update
    number (1-based) and f = `budget.fraction`, the share of the budget used so far (the
    trainer updates it before each scheduler step):

        constant      min(1, s / W)
        inverse_sqrt  min(s / W, sqrt(W / s))    Vaswani et al. 2017, eq. 3, rescaled so that
                      it peaks at 1 after W steps (the "Noam" shape)
        cosine        min(1, s / W) * 0.5 (1 + cos(pi f))    Loshchilov & Hutter 2017 (SGDR)
                      without restarts: from the peak down to 0 when the budget is spent
        linear        min(1, s / W) * (1 - f)
        plateau       constant; `LearningRateSchedule` lowers it when validation stalls
    """
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


class LearningRateSchedule:
    """Every learning-rate change of a run: the per-update multiplier (warmup, decay over the
    budget) and, with `optim.scheduler=plateau`, the reductions when validation stalls.

    The per-update multiplier scales each group's base lr (LambdaLR); a plateau reduction
    lowers those base lrs by the factor ReduceLROnPlateau applied, so warmup and reductions
    compose and the next update keeps the lower rate.

    Args:
        higher_is_better: direction of the validation metric the plateau watches.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        cfg: OptimConfig,
        budget: TrainingBudget,
        higher_is_better: bool = False,
    ) -> None:
        self.optimizer = optimizer
        self.budget = budget
        self.per_update = LambdaLR(optimizer, lr_multiplier(cfg, budget))
        self.plateau: ReduceLROnPlateau | None = None
        if cfg.scheduler is Scheduler.plateau:
            # torch reduces once more than `patience` bad validations are counted; reducing at
            # the plateau_patience-th one and counting again from zero means patience - 1.
            # threshold 0: any strictly better value is an improvement, as for early stopping.
            self.plateau = ReduceLROnPlateau(
                optimizer,
                mode="max" if higher_is_better else "min",
                factor=cfg.plateau_factor,
                patience=cfg.plateau_patience - 1,
                threshold=0.0,
                threshold_mode="abs",
            )

    @property
    def lr(self) -> float:
        """The learning rate of the next update (first parameter group)."""
        return self.optimizer.param_groups[0]["lr"]

    def after_update(self, steps_done: int, train_seconds: float) -> None:
        """Set the lr of the next update: the budget as it stands after `steps_done` updates."""
        self.budget.update(steps_done, train_seconds)
        self.per_update.step()

    def after_validation(self, value: float) -> bool:
        """Let the plateau schedule see a validation value; True when it lowered the lr."""
        if self.plateau is None:
            return False
        before = [group["lr"] for group in self.optimizer.param_groups]
        self.plateau.step(value)
        after = [group["lr"] for group in self.optimizer.param_groups]
        if after == before:
            return False
        self.per_update.base_lrs = [
            base * new / old if old else base
            for base, old, new in zip(self.per_update.base_lrs, before, after, strict=True)
        ]
        log.info("plateau: learning rate reduced to %.3g", self.lr)
        return True

    def state_dict(self) -> dict[str, Any]:
        plateau = self.plateau.state_dict() if self.plateau is not None else None
        return {"per_update": self.per_update.state_dict(), "plateau": plateau}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from a checkpoint; a checkpoint that holds only LambdaLR's state (no
        `per_update` key) restores that, and the plateau counts from zero."""
        if "per_update" not in state:
            state = {"per_update": state, "plateau": None}
        self.per_update.load_state_dict(state["per_update"])
        if self.plateau is not None and state["plateau"] is not None:
            self.plateau.load_state_dict(state["plateau"])
