"""The training loss: token-level cross entropy with optional label smoothing (Szegedy et al.
2016, section 7), plus the coverage loss term of a pointer-generator (See et al. 2017, eq. 13)
on the schedule the config sets.

Summed over non-padding target tokens; callers divide by the token count they need
("normalised by tokens" in training, mean NLL for validation perplexity).

A copy model returns log-probabilities over its extended vocabulary in place of logits; cross
entropy takes them as they are (their log_softmax is themselves, they already sum to one).
"""

import torch.nn.functional as F
from torch import Tensor

from attnseq.config.schema import OptimConfig
from attnseq.models.seq2seq import Seq2SeqOutput


def training_loss(
    output: Seq2SeqOutput, targets: Tensor, pad_id: int, optim: OptimConfig, step: int
) -> Tensor:
    """The summed loss of one batch at update `step` (0-based): cross entropy, plus the
    coverage term when the model returns one (`extras["coverage_loss"]`).

    Args:
        output: the model's forward output; logits (B, T, V).
        targets: (B, T) next tokens, pad_id where there is no token.
    """
    loss_sum, _ = sequence_loss(output.logits, targets, pad_id, optim.label_smoothing)
    if "coverage_loss" in output.extras:  # See et al. 2017, eq. 13: + lambda * covloss_t
        weight = coverage_weight(optim, step)
        loss_sum = loss_sum + coverage_term(output.extras["coverage_loss"], targets, pad_id, weight)
    return loss_sum


def coverage_weight(optim: OptimConfig, step: int) -> float:
    """lambda from `optim.coverage_start_step` on, 0 before: See et al. add the coverage loss
    for a last phase of training only."""
    return optim.coverage_lambda if step >= optim.coverage_start_step else 0.0


def sequence_loss(
    logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> tuple[Tensor, int]:
    """Summed cross entropy over non-pad targets.

    Args:
        logits: (B, T, V); targets: (B, T) with pad_id where there is no token.

    Returns:
        (sum of token losses as a 0-dim tensor, number of real target tokens)
    """
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),  # (B*T, V)
        targets.reshape(-1),  # (B*T,)
        ignore_index=pad_id,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
    return loss, int((targets != pad_id).sum())


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
