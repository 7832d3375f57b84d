"""The training objective (models/objective.py): each term against its formula written out
here, and `training_loss` as their weighted sum."""

import math

import pytest
import torch

from attnseq.config.schema import OptimConfig
from attnseq.models.objective import move_baseline, sequence_loss, token_loss_sum, training_loss
from attnseq.models.seq2seq import ReinforceSample, Seq2SeqOutput

PAD = 0
B, T, S, V = 2, 3, 4, 6
TARGETS = torch.tensor([[4, 2, 5], [3, 1, PAD]])  # (B, T): 5 real tokens
REAL = (TARGETS != PAD).float()
OPTIM = OptimConfig(
    label_smoothing=0.1,
    coverage_lambda=0.5,
    coverage_start_step=2,
    alignment_lambda=0.7,
    reinforce_lambda=1.5,
    reinforce_entropy=0.2,
    reinforce_baseline_decay=0.9,
)


def _smoothed_token_losses(logits: torch.Tensor, eps: float) -> torch.Tensor:
    """(B, T): -(1 - eps) log p(y) - eps/V sum_v log p(v) (Szegedy et al. 2016), 0 at padding."""
    log_p = logits.double().log_softmax(-1)
    gold = log_p.gather(-1, TARGETS.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (-(1 - eps) * gold - eps * log_p.mean(-1)) * REAL.double()


def _output(baseline: float) -> tuple[Seq2SeqOutput, torch.Tensor]:
    """A forward output with every term's inputs (seeded values) and a gold distribution
    (B, T, S) for guided alignment."""
    torch.manual_seed(3)
    gold = torch.rand(B, T, S).softmax(-1)
    gold[0, 1] = 0.0  # a step without a link adds nothing
    output = Seq2SeqOutput(
        logits=torch.randn(B, T, V),
        coverage_loss=torch.rand(B, T),
        alignment_attention=torch.rand(B, T, S).softmax(-1),
        reinforce=ReinforceSample(
            log_prob=(-torch.rand(B, T)).requires_grad_(),
            entropy=torch.rand(B, T),
            baseline=torch.tensor(baseline),
        ),
    )
    return output, gold


def test_cross_entropy_is_the_label_smoothed_sum_over_real_tokens() -> None:
    torch.manual_seed(0)
    logits = torch.randn(B, T, V)
    expected = _smoothed_token_losses(logits, 0.1).sum()
    assert float(token_loss_sum(logits, TARGETS, PAD, 0.1)) == pytest.approx(float(expected))
    loss, tokens = sequence_loss(logits, TARGETS, PAD)
    assert tokens == 5
    assert float(loss) == pytest.approx(float(_smoothed_token_losses(logits, 0.0).sum()))


def test_training_loss_is_the_weighted_sum_of_every_term() -> None:
    output, gold = _output(baseline=-1.25)
    sample = output.reinforce
    assert sample is not None and output.coverage_loss is not None
    rewards = -_smoothed_token_losses(output.logits, 0.0).sum(1) / REAL.sum(1)  # (B,)
    advantage = (rewards + 1.25).unsqueeze(1)  # r_b - b
    cross_entropy = _smoothed_token_losses(output.logits, 0.1).sum()
    coverage = 0.5 * (output.coverage_loss * REAL).sum()
    alignment = 0.7 * -(gold * output.alignment_attention.log()).sum()
    policy = (advantage * sample.log_prob.detach() * REAL).sum()
    reinforce = -1.5 * policy - 0.2 * (sample.entropy * REAL).sum()
    loss = training_loss(output, TARGETS, PAD, OPTIM, step=2, gold_alignment=gold)
    expected = cross_entropy + coverage + alignment + reinforce
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    # REINFORCE's gradient reaches the sample's log-probability only: -lambda_r (r - b)
    loss.backward()
    grad = sample.log_prob.grad
    torch.testing.assert_close(grad, (-1.5 * advantage * REAL).float())


def test_the_loss_leaves_the_baseline_and_the_training_step_moves_it_once() -> None:
    output, _ = _output(baseline=-1.25)
    sample = output.reinforce
    assert sample is not None
    for _ in range(2):  # computing the loss twice changes nothing
        training_loss(output, TARGETS, PAD, OPTIM, step=2)
    assert float(sample.baseline) == -1.25
    move_baseline(output, TARGETS, PAD, OPTIM.reinforce_baseline_decay)
    rewards = -_smoothed_token_losses(output.logits, 0.0).sum(1) / REAL.sum(1)
    moved = 0.9 * -1.25 + 0.1 * float(rewards.mean())  # b <- decay b + (1 - decay) mean(r)
    assert float(sample.baseline) == pytest.approx(moved, rel=1e-6)


def test_coverage_counts_from_its_start_step_on() -> None:
    before = training_loss(_output(-1.0)[0], TARGETS, PAD, OPTIM, step=1)
    after = training_loss(_output(-1.0)[0], TARGETS, PAD, OPTIM, step=2)
    coverage = 0.5 * (_output(-1.0)[0].coverage_loss * REAL).sum()
    assert float((after - before).detach()) == pytest.approx(float(coverage), rel=1e-5)
    assert float(coverage) > 0


def test_the_first_baseline_is_the_batch_mean_reward() -> None:
    """A NaN baseline (no reward seen) makes the advantages centred and becomes mean(r)."""
    output, _ = _output(math.nan)
    rewards = -_smoothed_token_losses(output.logits, 0.0).sum(1) / REAL.sum(1)
    loss = training_loss(output, TARGETS, PAD, OPTIM, step=0)
    loss.backward()
    advantage = (rewards - rewards.mean()).unsqueeze(1)
    assert output.reinforce is not None
    grad = output.reinforce.log_prob.grad
    torch.testing.assert_close(grad, (-1.5 * advantage * REAL).float())
    move_baseline(output, TARGETS, PAD, OPTIM.reinforce_baseline_decay)
    baseline = float(output.reinforce.baseline)
    assert baseline == pytest.approx(float(rewards.mean()), rel=1e-6)
