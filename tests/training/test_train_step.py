"""The seams of the training loop, one at a time: parameter groups, the learning-rate schedule
and `train_step` (the stopping policy: tests/training/test_stopping.py)."""

import copy
import math

import pytest
import torch
from helpers import tiny_model

from attnseq.config.choices import Scheduler
from attnseq.config.schema import OptimConfig
from attnseq.data.batching import collate
from attnseq.data.loader import TokenCounts
from attnseq.models.objective import sequence_loss
from attnseq.training.distributed import WorldInfo
from attnseq.training.optim import (
    LearningRateSchedule,
    TrainingBudget,
    build_optimizer,
    parameter_groups,
    regroup_state,
)
from attnseq.training.precision import MixedPrecision
from attnseq.training.train_step import UpdateParts, train_step

PAD, BOS, EOS = 0, 2, 3


def tiny_batch():
    examples = [([4, 5, 6], [6, 5, 4]), ([7, 8], [8, 7])]
    batch = collate(examples, [0, 1], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    counts = TokenCounts(src=5, tgt=7, padded=batch.src.numel() + batch.tgt_in.numel())
    return batch, counts


# ------------------------------------------------------------------ parameter groups
@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_biases_and_norms_do_not_decay(family: str) -> None:
    model = tiny_model(family)
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): name for name, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    biases_and_norms = {n for n in names.values() if "bias" in n or "norm" in n}
    assert biases_and_norms and biases_and_norms <= kept
    assert all(p.dim() >= 2 for p in decay["params"])  # weight matrices and embeddings
    assert decayed and not decayed & kept
    assert len(decayed) + len(kept) == len(list(model.parameters()))


def test_a_single_group_optimizer_state_resumes_into_the_two_groups() -> None:
    """Adam's per-parameter state survives the regrouping: the next step is the same."""
    model = tiny_model("transformer")
    batch, _ = tiny_batch()

    def loss() -> torch.Tensor:
        out = model(batch.src, batch.src_lengths, batch.tgt_in)
        return sequence_loss(out.logits, batch.tgt_out, PAD)[0]

    optim = OptimConfig(lr=1e-2)  # weight_decay 0: one group or two, the same update
    single = torch.optim.AdamW(
        model.parameters(), lr=optim.lr, betas=tuple(optim.betas), weight_decay=0.0
    )
    loss().backward()
    single.step()
    saved = copy.deepcopy(single.state_dict())  # step() updates the moments in place
    start = {k: v.clone() for k, v in model.state_dict().items()}

    single.zero_grad()
    loss().backward()
    single.step()
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    model.load_state_dict(start)
    grouped = build_optimizer(model, optim)
    grouped.load_state_dict(regroup_state(saved, model))
    grouped.zero_grad()
    loss().backward()
    grouped.step()
    torch.testing.assert_close(model.state_dict(), expected)


# ------------------------------------------------------------------- schedule
def test_plateau_cuts_after_patience_stale_validations_and_keeps_warmup() -> None:
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    cfg = OptimConfig(
        lr=1.0, scheduler=Scheduler.plateau, warmup_steps=4, plateau_patience=2, plateau_factor=0.5
    )
    schedule = LearningRateSchedule(optimizer, cfg, TrainingBudget(max_steps=100))
    assert schedule.lr == pytest.approx(0.25)  # warmup: step 1 of 4
    cuts = [schedule.after_validation(loss) for loss in [3.0, 2.0, 2.5, 2.5, 2.4, 2.4, 2.4]]
    assert cuts == [False, False, False, True, False, True, False]
    assert schedule.lr == pytest.approx(0.25 * 0.25)
    for done in range(1, 4):
        optimizer.step()
        schedule.after_update(done, 0.0)
    assert schedule.lr == pytest.approx(1.0 * 0.25)  # warmup is over; two cuts remain
    state = schedule.state_dict()
    again = LearningRateSchedule(
        torch.optim.SGD([parameter], lr=1.0), cfg, TrainingBudget(max_steps=100)
    )
    again.load_state_dict(state)
    again.per_update.step()
    schedule.per_update.step()
    assert again.lr == pytest.approx(schedule.lr)
    assert again.after_validation(2.4) == schedule.after_validation(2.4)


def test_a_higher_is_better_metric_plateaus_when_it_stops_rising() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    cfg = OptimConfig(lr=1.0, scheduler=Scheduler.plateau, warmup_steps=0, plateau_patience=1)
    schedule = LearningRateSchedule(optimizer, cfg, TrainingBudget(), higher_is_better=True)
    assert [schedule.after_validation(v) for v in [10.0, 20.0, 15.0]] == [False, False, True]


def test_other_schedules_never_react_to_validation() -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = LearningRateSchedule(
        optimizer, OptimConfig(lr=1.0, warmup_steps=0), TrainingBudget()
    )
    assert not any(schedule.after_validation(9.0) for _ in range(5))
    assert schedule.lr == 1.0


# ------------------------------------------------------------------- stopping


# ------------------------------------------------------------------- train_step
def parts_for(model: torch.nn.Module, optim: OptimConfig) -> UpdateParts:
    return UpdateParts(
        model,
        model,
        build_optimizer(model, optim),
        MixedPrecision("fp32", torch.device("cpu")),
        optim,
        WorldInfo(),
    )


def test_train_step_returns_the_per_token_loss_and_updates_the_weights() -> None:
    model = tiny_model("transformer")
    batch, counts = tiny_batch()
    with torch.no_grad():
        model.eval()
        out = model(batch.src, batch.src_lengths, batch.tgt_in)
        expected = sequence_loss(out.logits, batch.tgt_out, PAD)[0].item() / counts.tgt
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(0)
    outcome = train_step(parts_for(model, OptimConfig(lr=1e-2)), [(batch, counts)], step=0)
    assert outcome.applied and outcome.problem == ""
    assert outcome.loss == pytest.approx(expected, rel=1e-4)
    assert outcome.tokens == (5.0, 7.0, float(counts.padded))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_non_finite_loss_skips_the_update_without_touching_the_weights() -> None:
    model = tiny_model("transformer")
    batch, counts = tiny_batch()
    with torch.no_grad():
        model.output_proj.weight[0, 0] = math.nan  # every position's logits see it
    before = [p.detach().clone() for p in model.parameters()]
    outcome = train_step(parts_for(model, OptimConfig(lr=1e-2)), [(batch, counts)], step=0)
    assert not outcome.applied and outcome.problem.startswith("loss nan")
    for a, b in zip(before, model.parameters(), strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)
