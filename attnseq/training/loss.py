"""The training loss of one batch: cross entropy, plus the coverage term of a pointer-generator
(See et al. 2017, eq. 13) on the schedule the config sets (`optim.coverage_lambda` from update
`optim.coverage_start_step` on). Summed over the real target tokens; train_step.py divides.
"""

from torch import Tensor

from attnseq.config.schema import OptimConfig
from attnseq.models import loss
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
    loss_sum, _ = loss.sequence_loss(output.logits, targets, pad_id, optim.label_smoothing)
    if "coverage_loss" in output.extras:  # See et al. 2017, eq. 13: + lambda * covloss_t
        weight = coverage_weight(optim, step)
        loss_sum = loss_sum + loss.coverage_term(
            output.extras["coverage_loss"], targets, pad_id, weight
        )
    return loss_sum


def coverage_weight(optim: OptimConfig, step: int) -> float:
    """lambda from `optim.coverage_start_step` on, 0 before: See et al. add the coverage loss
    for a last phase of training only."""
    return optim.coverage_lambda if step >= optim.coverage_start_step else 0.0
