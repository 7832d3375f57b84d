"""The training loss of one batch: cross entropy, plus the coverage term of a pointer-generator
(See et al. 2017, eq. 13) on the schedule the config sets (`optim.coverage_lambda` from update
`optim.coverage_start_step` on), plus the guided alignment term (Garg et al. 2019, section 4.2:
`optim.alignment_lambda` times the cross entropy between the batch's gold alignment and the
supervised attention), plus the REINFORCE term of sampled hard attention (Xu et al. 2015,
section 4.1, eq. 12; models/hard_attention.py), which also moves the model's baseline. Summed over
the real target tokens; train_step.py divides. `gumbel_temperature` is the Gumbel-softmax
temperature schedule that train_step.py hands the model before each update.
"""

import math

from torch import Tensor

from attnseq.config.schema import OptimConfig, TrainConfig
from attnseq.models import hard_attention, loss_terms
from attnseq.models.seq2seq import ALIGNMENT_ATTENTION, AlignmentHead, Seq2SeqOutput


def training_loss(
    output: Seq2SeqOutput,
    targets: Tensor,
    pad_id: int,
    optim: OptimConfig,
    step: int,
    gold_alignment: Tensor | None = None,
) -> Tensor:
    """The summed loss of one batch at update `step` (0-based): cross entropy, plus the
    coverage term when the model returns one (`extras["coverage_loss"]`), plus the guided
    alignment term when the batch has gold links and the model returned the supervised
    attention (`extras["alignment_attention"]`).

    Args:
        output: the model's forward output; logits (B, T, V).
        targets: (B, T) next tokens, pad_id where there is no token.
        gold_alignment: (B, T, S) the batch's gold distribution (`Batch.alignment`) or None.
    """
    loss_sum, _ = loss_terms.sequence_loss(output.logits, targets, pad_id, optim.label_smoothing)
    if "coverage_loss" in output.extras:  # See et al. 2017, eq. 13: + lambda * covloss_t
        weight = coverage_weight(optim, step)
        loss_sum = loss_sum + loss_terms.coverage_term(
            output.extras["coverage_loss"], targets, pad_id, weight
        )
    attention = output.extras.get(ALIGNMENT_ATTENTION)
    if gold_alignment is not None and attention is not None:
        term = loss_terms.alignment_term(attention, gold_alignment, optim.alignment_lambda)
        loss_sum = loss_sum + term
    if hard_attention.HARD_LOG_PROB in output.extras:
        loss_sum = loss_sum + reinforce_loss(output, targets, pad_id, optim)
    return loss_sum


def reinforce_loss(
    output: Seq2SeqOutput, targets: Tensor, pad_id: int, optim: OptimConfig
) -> Tensor:
    """The REINFORCE term of a sampling pass (`extras["hard_log_prob"]`, "hard_entropy" (B, T))
    with the rewards of this batch; then the baseline `extras["reinforce_baseline"]` moves
    towards them (b <- decay b + (1 - decay) mean r)."""
    extras = output.extras
    rewards = hard_attention.example_rewards(output.logits, targets, pad_id)  # (B,)
    baseline = extras[hard_attention.REINFORCE_BASELINE]
    term = hard_attention.reinforce_term(
        extras[hard_attention.HARD_LOG_PROB],
        extras[hard_attention.HARD_ENTROPY],
        rewards,
        baseline,
        targets != pad_id,
        (optim.reinforce_lambda, optim.reinforce_entropy),
    )
    hard_attention.update_baseline(baseline, rewards, optim.reinforce_baseline_decay)
    return term


def gumbel_temperature(optim: OptimConfig, step: int) -> float:
    """tau at update `step`: the exponential anneal of Jang et al. 2017 (section 4.1, tau
    annealed towards a floor) from `optim.gumbel_tau_start` to `optim.gumbel_tau_end` over
    `optim.gumbel_anneal_steps` updates, then constant:

        tau(step) = tau_start (tau_end / tau_start) ^ min(1, step / anneal_steps)
    """
    start, end, steps = optim.gumbel_tau_start, optim.gumbel_tau_end, optim.gumbel_anneal_steps
    if steps == 0:
        return end
    progress = min(1.0, step / steps)
    return math.exp(math.log(start) + progress * (math.log(end) - math.log(start)))


def coverage_weight(optim: OptimConfig, step: int) -> float:
    """lambda from `optim.coverage_start_step` on, 0 before: See et al. add the coverage loss
    for a last phase of training only."""
    return optim.coverage_lambda if step >= optim.coverage_start_step else 0.0


def supervised_attention(cfg: TrainConfig) -> AlignmentHead | None:
    """The attention guided alignment supervises (`model.alignment_layer`/`alignment_head`),
    or None when `optim.alignment_lambda` is 0 (the forward pass then stays the plain one)."""
    if cfg.optim.alignment_lambda == 0:
        return None
    return AlignmentHead(cfg.model.alignment_layer, cfg.model.alignment_head)
