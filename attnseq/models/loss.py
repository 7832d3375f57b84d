"""The terms of a seq2seq model's objective: token-level cross entropy with optional label
smoothing (Szegedy et al. 2016, section 7), and the coverage loss term of a pointer-generator
(See et al. 2017, eq. 13). Training combines them (attnseq/training/loss.py); validation reports
the cross entropy.

Summed over non-padding target tokens; callers divide by the token count they need
("normalised by tokens" in training, mean NLL for validation perplexity).

A copy model returns log-probabilities over its extended vocabulary in place of logits; cross
entropy takes them as they are (their log_softmax is themselves, they already sum to one).
"""

import torch.nn.functional as F
from torch import Tensor


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
