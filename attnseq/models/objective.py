"""The training objective of a seq2seq model: every term, its formula and citation, and their
weighted sum (`training_loss`). Validation, scoring and head importance use its cross entropy
(`sequence_loss`); training/train_step.py runs the update around `training_loss`.

The loss of one batch, summed over its real (non-padding) target positions (b, t):

    L = sum_{b,t} CE_eps(y_bt | x_b, y_b<t)                  cross entropy, label smoothing eps
      + lambda_c(step) sum_{b,t} covloss_bt                  coverage (pointer-generator)
      + lambda_a sum_{b,t} - sum_s G_bts log A_bts           guided alignment
      - lambda_r sum_b (r_b - b) sum_t log p(s~_bt | a_bt)   REINFORCE (sampled hard attention)
      - lambda_e sum_b sum_t H(a_bt)                         its entropy bonus

Each term is present when its inputs are: coverage when the model returns
`extras["coverage_loss"]`, guided alignment when the batch has gold links and the model returned
the supervised attention, REINFORCE when the model sampled (`extras["hard_log_prob"]`). The
weights are settings: eps `optim.label_smoothing`, lambda_c `optim.coverage_lambda` from update
`optim.coverage_start_step` on (0 before), lambda_a `optim.alignment_lambda`, lambda_r
`optim.reinforce_lambda`, lambda_e `optim.reinforce_entropy`. Every term is summed, not
averaged, so that the training step's one division by the real target tokens of the (global,
accumulated) batch gives each paper's per-token mean, and validation divides by the count it
needs (mean NLL for perplexity).

Cross entropy with label smoothing (Szegedy, Vanhoucke, Ioffe, Shlens & Wojna 2016, "Rethinking
the Inception Architecture for Computer Vision", CVPR, section 7): the target distribution is
(1 - eps) one_hot(y) + eps / V. A copy model returns log-probabilities over its extended
vocabulary in place of logits; cross entropy takes them as they are (their log_softmax is
themselves, they already sum to one).

Coverage (See, Liu & Manning 2017, "Get To The Point: Summarization with Pointer-Generator
Networks", ACL, eq. 12-13): covloss_t = sum_i min(a_i^t, c_i^t), computed by the model
(models/pointer_generator.py); the paper adds it for a last phase of training only, hence the
start step.

Guided alignment (Garg, Peitz, Nallapati & Barrett 2019, "Jointly Learning to Align and
Translate with Transformer Models", EMNLP, section 4.2): the cross entropy between the gold
distribution G of each step (data/batching.py `gold_distribution`) and the supervised attention
A (`model.alignment_layer`, `model.alignment_head`).

REINFORCE for hard attention trained by sampling (Xu, Ba, Kiros, Cho, Courville, Salakhutdinov,
Zemel & Bengio 2015, "Show, Attend and Tell: Neural Image Caption Generation with Visual
Attention", ICML, section 4.1, eq. 11-12). With s~ the sampled source positions of an example
(models/hard_attention.py) and a the attention distributions:

    dL_s/dW ~ d log p(y | s~, a)/dW
              + lambda_r (log p(y | s~, a) - b) d log p(s~ | a)/dW
              + lambda_e d H[s~]/dW                                            (eq. 12)

The first term is the ordinary cross entropy through the chosen context; `reinforce_term` adds
the other two as the surrogate loss above (minimised). The reward r_b = -(example b's mean token
cross entropy) is the example's log-likelihood per token (Xu et al. use the sum; the mean keeps
the scale of r independent of the length), detached: it is a number, not a path for gradients.
The baseline b is the moving average b_k = decay b_{k-1} + (1 - decay) mean_b(r_b) over updates
(`optim.reinforce_baseline_decay`; Xu et al.: 0.9), starting at the first batch's mean reward;
its value lives in the model (`MovingAverageBaseline`, a buffer, so checkpoints and exact resume
carry it) and `reinforce_loss` moves it after computing the term.

Shapes: B batch, S source length, T target length, V (extended) vocabulary.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from attnseq.config.schema import OptimConfig
from attnseq.models.hard_attention import HARD_ENTROPY, HARD_LOG_PROB, REINFORCE_BASELINE
from attnseq.models.seq2seq import ALIGNMENT_ATTENTION, Seq2SeqOutput


def training_loss(
    output: Seq2SeqOutput,
    targets: Tensor,
    pad_id: int,
    optim: OptimConfig,
    step: int,
    gold_alignment: Tensor | None = None,
) -> Tensor:
    """L of one batch at update `step` (0-based; module docstring), a 0-dim tensor summed over
    the real target tokens: cross entropy, plus the coverage term when the model returns one
    (`extras["coverage_loss"]`), plus the guided alignment term when the batch has gold links
    and the model returned the supervised attention (`extras["alignment_attention"]`), plus the
    REINFORCE term when the model sampled (which also moves the model's baseline).

    Args:
        output: the model's forward output; logits (B, T, V).
        targets: (B, T) next tokens, pad_id where there is no token.
        optim: the terms' weights (module docstring).
        gold_alignment: (B, T, S) the batch's gold distribution (`Batch.alignment`) or None.
    """
    loss_sum = token_loss_sum(output.logits, targets, pad_id, optim.label_smoothing)
    if "coverage_loss" in output.extras:  # See et al. 2017, eq. 13: + lambda * covloss_t
        weight = coverage_weight(optim, step)
        loss_sum = loss_sum + coverage_term(output.extras["coverage_loss"], targets, pad_id, weight)
    attention = output.extras.get(ALIGNMENT_ATTENTION)
    if gold_alignment is not None and attention is not None:
        term = alignment_term(attention, gold_alignment, optim.alignment_lambda)
        loss_sum = loss_sum + term
    if HARD_LOG_PROB in output.extras:
        loss_sum = loss_sum + reinforce_loss(output, targets, pad_id, optim)
    return loss_sum


# Cross entropy with label smoothing (Szegedy et al. 2016, section 7)


def token_loss_sum(
    logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> Tensor:
    """Summed cross entropy over non-pad targets, a 0-dim tensor on the logits' device (no
    host-device synchronisation: training counts its tokens on the host).

    Args:
        logits: (B, T, V); targets: (B, T) with pad_id where there is no token.
    """
    return _cross_entropy_sum(logits, targets, pad_id, label_smoothing)


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
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),  # (B*T, V)
        targets.reshape(-1),  # (B*T,)
        ignore_index=pad_id,
        reduction="sum",
        label_smoothing=label_smoothing,
    )


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
        per_position: (B, T) covloss_t of every position (`extras["coverage_loss"]`).
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
        attention: (B, T, S) the supervised attention (`extras["alignment_attention"]`).
        gold: (B, T, S) the gold distribution (`Batch.alignment`).
        weight: lambda (`optim.alignment_lambda`).
    """
    log_attention = attention.float().clamp_min(torch.finfo(torch.float32).tiny).log()
    return weight * -(gold * log_attention).sum()


# REINFORCE for sampled hard attention (Xu et al. 2015, section 4.1, eq. 12)


def reinforce_loss(
    output: Seq2SeqOutput, targets: Tensor, pad_id: int, optim: OptimConfig
) -> Tensor:
    """The REINFORCE term of a sampling pass (`extras["hard_log_prob"]`, "hard_entropy" (B, T))
    with the rewards of this batch; then the baseline `extras["reinforce_baseline"]` moves
    towards them (b <- decay b + (1 - decay) mean r).

    Args:
        output: the model's forward output of a sampling pass; logits (B, T, V).
        targets: (B, T) next tokens, pad_id where there is no token.
        optim: lambda_r, lambda_e and the baseline's decay.
    """
    extras = output.extras
    rewards = example_rewards(output.logits, targets, pad_id)  # (B,)
    baseline = extras[REINFORCE_BASELINE]
    term = reinforce_term(
        extras[HARD_LOG_PROB],
        extras[HARD_ENTROPY],
        rewards,
        baseline,
        targets != pad_id,
        (optim.reinforce_lambda, optim.reinforce_entropy),
    )
    update_baseline(baseline, rewards, optim.reinforce_baseline_decay)
    return term


def example_rewards(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    """r_b = -(mean cross entropy over example b's real target tokens), detached; (B,).

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
    """The surrogate of eq. 12's last two terms, summed over real tokens:

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
    """b <- decay b + (1 - decay) mean(r), in place; the first update sets b = mean(r).

    Args:
        baseline: 0-dim b, the model's buffer (NaN before the first reward).
        rewards: (B,) r_b of this batch.
    """
    mean = rewards.mean().to(baseline.dtype)
    # torch.where, not an `if`: no host-device synchronisation on a GPU
    baseline.copy_(torch.where(baseline.isnan(), mean, decay * baseline + (1.0 - decay) * mean))
