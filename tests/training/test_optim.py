"""Learning-rate schedules: the shapes optim.py's docstring gives, and annealing over whichever
budget limit comes first."""

import math
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.config.choices import Scheduler
from attnseq.config.schema import OptimConfig
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.optim import LearningRateSchedule, TrainingBudget, lr_multiplier
from attnseq.training.run import run_training


def multipliers(scheduler: str, warmup: int, budget: TrainingBudget, steps: int) -> list[float]:
    """The lr multiplier of updates 1..steps, the budget updated as the trainer does."""
    cfg = OptimConfig(scheduler=Scheduler[scheduler], warmup_steps=warmup)
    schedule = lr_multiplier(cfg, budget)
    values = []
    for done in range(steps):  # update done+1 runs at the multiplier computed after `done`
        budget.update(done, seconds=0.0)
        values.append(schedule(done))
    return values


def test_warmup_then_inverse_sqrt_peaks_at_one() -> None:
    values = multipliers("inverse_sqrt", 4, TrainingBudget(max_steps=100), 16)
    assert values[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert values[15] == pytest.approx(math.sqrt(4 / 16))  # update 16


def test_cosine_and_linear_reach_zero_at_the_step_budget() -> None:
    cosine = multipliers("cosine", 0, TrainingBudget(max_steps=10), 10)
    assert cosine[0] == pytest.approx(1.0)
    assert cosine[5] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))  # after 5 of 10
    linear = multipliers("linear", 2, TrainingBudget(max_steps=10), 10)
    assert linear[:3] == pytest.approx([0.5 * 1.0, 1.0 * 0.9, 0.8])
    final = TrainingBudget(max_steps=10)
    final.update(10, 0.0)
    for name in ("cosine", "linear"):
        assert lr_multiplier(OptimConfig(scheduler=Scheduler[name]), final)(10) == pytest.approx(0)


def test_the_nearest_limit_sets_the_budget() -> None:
    budget = TrainingBudget(max_steps=1000, max_epochs=2, max_seconds=600.0, steps_per_epoch=50)
    assert budget.update(25, seconds=10.0) == pytest.approx(0.25)  # epochs: 25 of 100 updates
    assert budget.update(25, seconds=300.0) == pytest.approx(0.5)  # minutes bind now
    assert budget.update(500, seconds=0.0) == 1.0  # never more than the whole budget
    assert TrainingBudget().update(10**6, 10.0**6) == 0.0  # no limit: nothing to anneal over


def test_scheduler_sets_the_optimizer_lr() -> None:
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.1)
    budget = TrainingBudget(max_steps=4)
    schedule = LearningRateSchedule(optimizer, OptimConfig(scheduler=Scheduler.linear), budget)
    lrs = []
    for done in range(1, 5):
        lrs.append(schedule.lr)
        optimizer.step()
        schedule.after_update(done, 0.0)
    assert lrs == pytest.approx([0.1, 0.075, 0.05, 0.025])


@pytest.mark.slow
def test_a_training_run_anneals_to_zero_over_its_epochs(tmp_path: Path) -> None:
    cfg = tiny_config(
        "optim.scheduler=cosine",
        "trainer.max_steps=null",
        "trainer.max_epochs=2",
        "data.train_size=60",
        "data.max_tokens=128",
    )
    run_training(cfg, tmp_path)
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["progress"]["epoch"] == 2
    assert last["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.0, abs=1e-12)
