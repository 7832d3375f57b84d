"""The training objective of a seq2seq model: every term with its formula and citation, and their
weighted sum (`training_loss`); validation, scoring and head importance use its cross entropy
(`sequence_loss`). Every term is summed over the real target tokens, not averaged: the training
step divides once by the tokens of the (global, accumulated) batch, which gives each paper's
per-token mean.

Shapes: B batch, S source length, T target length, V (extended) vocabulary.
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from attnseq.config.schema import OptimConfig
from attnseq.models.seq2seq import Seq2SeqOutput


class BatchLoss(NamedTuple):
    """One batch's training loss and, beside it, its negative log-likelihood, each a 0-dim
    tensor summed over the real target positions (b, t).

    loss: L of `training_loss`, what the update minimises.
    nll: -sum_{b,t} log p(y_bt | x_b, y_b<t), detached: the cross entropy without label
        smoothing and without the other terms, what a perplexity is the exponential of (per
        token), as validation's loss is.
    """

    loss: Tensor
    nll: Tensor


def training_loss(
    output: Seq2SeqOutput,
    targets: Tensor,
    pad_id: int,
    optim: OptimConfig,
    step: int,
    gold_alignment: Tensor | None = None,
) -> BatchLoss:
    """The loss of one batch at update `step` (0-based), summed over its real target positions
    (b, t), and its negative log-likelihood (`BatchLoss`):

        L = sum_{b,t} CE_eps(y_bt | x_b, y_b<t)                  cross entropy, label smoothing
          + lambda_c(step) sum_{b,t} covloss_bt                  coverage (pointer-generator)
          + lambda_a sum_{b,t} - sum_s G_bts log A_bts           guided alignment
          - lambda_r sum_b (r_b - b) sum_t log p(s~_bt | a_bt)   REINFORCE (sampled hard
          - lambda_e sum_b sum_t H(a_bt)                           attention) and its bonus

    A term is there when its inputs are: `coverage_loss`, gold links with the
    `alignment_attention`, a `reinforce` sample. The weights: eps `optim.label_smoothing`
    (spread over the output's `support`), lambda_c `optim.coverage_lambda` from
    `optim.coverage_start_step` on, lambda_a `optim.alignment_lambda`, lambda_r
    `optim.reinforce_lambda`, lambda_e `optim.reinforce_entropy`. The loss changes nothing: the
    training step moves the REINFORCE baseline (`move_baseline`).

    Args:
        output: the model's forward output; logits (B, T, V).
        targets: (B, T) next tokens, pad_id where there is no token.
        optim: the terms' weights.
        gold_alignment: (B, T, S) the batch's gold distribution (`Batch.alignment`) or None.
    """
    eps = optim.label_smoothing
    loss_sum = token_loss_sum(output.logits, targets, pad_id, eps, output.support)
    # without smoothing the cross entropy is the nll: no second pass over the logits
    nll = loss_sum.detach() if eps == 0 else target_nll_sum(output.logits, targets, pad_id)
    if output.coverage_loss is not None:  # See et al. 2017, eq. 13: + lambda * covloss_t
        weight = coverage_weight(optim, step)
        loss_sum = loss_sum + coverage_term(output.coverage_loss, targets, pad_id, weight)
    attention = output.alignment_attention
    if gold_alignment is not None and attention is not None:
        term = alignment_term(attention, gold_alignment, optim.alignment_lambda)
        loss_sum = loss_sum + term
    if output.reinforce is not None:
        loss_sum = loss_sum + reinforce_loss(output, targets, pad_id, optim)
    return BatchLoss(loss_sum, nll)


# Cross entropy with label smoothing (Szegedy et al. 2016, section 7)


def token_loss_sum(
    logits: Tensor,
    targets: Tensor,
    pad_id: int,
    label_smoothing: float = 0.0,
    support: Tensor | None = None,
) -> Tensor:
    """Summed cross entropy over non-pad targets against the label-smoothed target
    (1 - eps) one_hot(y) + eps u (Szegedy, Vanhoucke, Ioffe, Shlens & Wojna 2016, "Rethinking
    the Inception Architecture for Computer Vision", CVPR, section 7), u uniform over all V
    ids or, given, over each example's support; a 0-dim tensor on the logits' device (no
    host-device synchronisation: training counts its tokens on the host). A copy model's
    log-probabilities go in as logits: their log_softmax is themselves.

    Args:
        logits: (B, T, V); targets: (B, T) with pad_id where there is no token.
        support: (B, V) bool, the ids u spreads over per example (`Seq2SeqOutput.support`).
    """
    if support is None or label_smoothing == 0:
        return _cross_entropy_sum(logits, targets, pad_id, label_smoothing)
    return smoothed_cross_entropy_sum(logits, targets, pad_id, label_smoothing, support)


@torch.no_grad()
def target_nll_sum(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """-sum log p(y) over the non-pad targets, outside autograd: the nll beside a smoothed
    loss, a 0-dim tensor on the logits' device (no host-device synchronisation).

    Args:
        logits: (B, T, V); targets: (B, T) with pad_id where there is no token.
    """
    return _cross_entropy_sum(logits, targets, pad_id, 0.0)


def sequence_loss(
    logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, int]:
    """`token_loss_sum` and the number of real target tokens (read from the device).

    Returns:
        (sum of token losses as a 0-dim tensor, number of real target tokens)
    """
    loss = _cross_entropy_sum(logits, targets, pad_id, label_smoothing)
    return loss, int((targets != pad_id).sum())


def _cross_entropy_sum(
    logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float
) -> Tensor:
    """CE_eps with the uniform part over all V ids."""
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),  # (B*T, V)
        targets.reshape(-1),  # (B*T,)
        ignore_index=pad_id,
        reduction="sum",
        label_smoothing=label_smoothing,
    )


def smoothed_cross_entropy_sum(
    logits: Tensor, targets: Tensor, pad_id: int, eps: float, support: Tensor
) -> Tensor:
    """CE_eps with the uniform part over each example's support U_b (the target distribution
    built explicitly, as Joey NMT's loss.py does), summed over the real target tokens:

        CE_eps(y) = -(1 - eps) log p(y) - eps / |U_b| sum_{v in U_b} log p(v)

    Args:
        logits: (B, T, V); targets: (B, T) with pad_id where there is no token, each in its
            example's support.
        support: (B, V) bool, U_b.
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    real = targets != pad_id  # (B, T)
    gold = log_probs.gather(-1, targets.masked_fill(~real, 0).unsqueeze(-1)).squeeze(-1)
    within = support.unsqueeze(1)  # (B, 1, V)
    uniform = log_probs.masked_fill(~within, 0.0).sum(dim=-1) / within.sum(dim=-1)  # (B, T)
    token_loss = -(1.0 - eps) * gold - eps * uniform  # (B, T)
    return torch.where(real, token_loss, 0.0).sum()


# Coverage (See et al. 2017, eq. 13)


def coverage_weight(optim: OptimConfig, step: int) -> float:
    """lambda_c at update `step`: `optim.coverage_lambda` from `optim.coverage_start_step` on,
    0 before: See et al. add the coverage loss for a last phase of training only."""
    return optim.coverage_lambda if step >= optim.coverage_start_step else 0.0


def coverage_term(per_position: Tensor, targets: Tensor, pad_id: int, weight: float) -> Tensor:
    """lambda * sum over real target positions of covloss_t (See et al. 2017, eq. 13), summed
    like `sequence_loss`, so that one division by the token count gives the paper's per-step
    mean of -log P(w*_t) + lambda covloss_t.

    Args:
        per_position: (B, T) covloss_t of every position (`Seq2SeqOutput.coverage_loss`).
        targets: (B, T) loss targets, pad_id where there is no token.
        weight: lambda.
    """
    return weight * (per_position * (targets != pad_id)).sum()


# Guided alignment (Garg et al. 2019, section 4.2)


def alignment_term(attention: Tensor, gold: Tensor, weight: float) -> Tensor:
    """lambda * the guided alignment loss of Garg et al. 2019 ("Jointly Learning to Align and
    Translate with Transformer Models", EMNLP, section 4.2), summed over the target positions:

        lambda * sum_{b,t} - sum_s G[b, t, s] log A[b, t, s]

    the cross entropy between the gold distribution G of each step (batching.py
    `gold_distribution`: the step's linked source pieces, normalised) and the supervised
    attention A. Rows without a link are all zero in G and add nothing; one division by the
    target token count (as `sequence_loss`) gives the paper's per-position mean. Attention
    weights of masked source positions are exactly 0 and their gold is 0 too: the clamp keeps
    0 * log 0 at 0 without biasing any linked position.

    Args:
        attention: (B, T, S) the supervised attention (`Seq2SeqOutput.alignment_attention`).
        gold: (B, T, S) the gold distribution (`Batch.alignment`).
        weight: lambda (`optim.alignment_lambda`).
    """
    log_attention = attention.float().clamp_min(torch.finfo(torch.float32).tiny).log()
    return weight * -(gold * log_attention).sum()


# REINFORCE for sampled hard attention (Xu et al. 2015, section 4.1, eq. 12)


def reinforce_loss(
    output: Seq2SeqOutput, targets: Tensor, pad_id: int, optim: OptimConfig
) -> Tensor:
    """The REINFORCE term of a sampling pass (`output.reinforce`) with the rewards of this
    batch against the baseline the pass read.

    Args:
        output: the model's forward output of a sampling pass; logits (B, T, V).
        targets: (B, T) next tokens, pad_id where there is no token.
        optim: lambda_r and lambda_e.
    """
    sample = output.reinforce
    assert sample is not None
    return reinforce_term(
        sample.log_prob,
        sample.entropy,
        example_rewards(output.logits, targets, pad_id),  # (B,)
        sample.baseline,
        targets != pad_id,
        (optim.reinforce_lambda, optim.reinforce_entropy),
    )


def move_baseline(output: Seq2SeqOutput, targets: Tensor, pad_id: int, decay: float) -> None:
    """b <- decay b + (1 - decay) mean r for a sampling pass (`output.reinforce`), with the
    rewards of its batch: the training step's, once per (micro-)batch, after its loss.

    Args:
        targets: (B, T) next tokens, pad_id where there is no token.
    """
    assert output.reinforce is not None
    rewards = example_rewards(output.logits, targets, pad_id)  # (B,)
    update_baseline(output.reinforce.baseline, rewards, decay)


def example_rewards(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """r_b = -(mean cross entropy over example b's real target tokens), detached: the example's
    log-likelihood per token (Xu et al. sum it; the mean keeps r independent of the length),
    a number, not a path for gradients; (B,).

    Args:
        logits: (B, T, V); targets: (B, T) with pad_id where there is no token.
    """
    token_loss = F.cross_entropy(
        logits.detach().float().transpose(1, 2), targets, ignore_index=pad_id, reduction="none"
    )  # (B, T), 0 at padding
    lengths = (targets != pad_id).sum(dim=1).clamp_min(1)
    return -token_loss.sum(dim=1) / lengths


def reinforce_term(
    log_prob: Tensor,
    entropy: Tensor,
    rewards: Tensor,
    baseline: Tensor,
    real: Tensor,
    weights: tuple[float, float],
) -> Tensor:
    """REINFORCE for sampled hard attention (Xu, Ba, Kiros, Cho, Courville, Salakhutdinov,
    Zemel & Bengio 2015, "Show, Attend and Tell", ICML, section 4.1, eq. 12): with s~ the
    sampled source positions and a the attention distributions,

        dL_s/dW ~ d log p(y | s~, a)/dW + lambda_r (log p(y | s~, a) - b) d log p(s~ | a)/dW
                  + lambda_e d H[s~]/dW

    The first term is the cross entropy through the chosen context; this is the surrogate of
    the other two, summed over real tokens (minimised):

        - lambda_r sum_b (r_b - b) sum_t log p(s~_bt | a_bt)  -  lambda_e sum_b sum_t H(a_bt)

    Args:
        log_prob: (B, T) log-probability of each step's sample.
        entropy: (B, T) entropy of each step's attention distribution.
        rewards: (B,) r_b (`example_rewards`).
        baseline: 0-dim b; NaN (no reward seen yet) counts as the batch's mean reward.
        real: bool (B, T), True at real target tokens.
        weights: (lambda_r, lambda_e).
    """
    reinforce_weight, entropy_weight = weights
    b = torch.where(baseline.isnan(), rewards.mean(), baseline)
    advantage = (rewards - b).detach().unsqueeze(1)  # (B, 1)
    real = real.to(log_prob.dtype)
    policy = (advantage * log_prob * real).sum()
    bonus = (entropy * real).sum()
    return -reinforce_weight * policy - entropy_weight * bonus


@torch.no_grad()
def update_baseline(baseline: Tensor, rewards: Tensor, decay: float) -> None:
    """The moving-average baseline, b <- decay b + (1 - decay) mean(r), in place, once per
    training (micro-)batch (`optim.reinforce_baseline_decay`; Xu et al.: 0.9); the first
    update sets b = mean(r).

    Args:
        baseline: 0-dim b, the model's buffer (NaN before the first reward).
        rewards: (B,) r_b of this batch.
    """
    mean = rewards.mean().to(baseline.dtype)
    # torch.where, not an `if`: no host-device synchronisation on a GPU
    baseline.copy_(torch.where(baseline.isnan(), mean, decay * baseline + (1.0 - decay) * mean))
