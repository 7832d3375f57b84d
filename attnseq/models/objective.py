"""The terms of a seq2seq model's objective: token-level cross entropy with optional label
smoothing (Szegedy et al. 2016, section 7), the coverage loss term of a pointer-generator
(See et al. 2017, eq. 13) and the guided alignment term (Garg et al. 2019, section 4.2).
Training combines them (attnseq/training/train_step.py); validation reports the cross entropy.

Summed over non-padding target tokens; callers divide by the token count they need
("normalised by tokens" in training, mean NLL for validation perplexity).

A copy model returns log-probabilities over its extended vocabulary in place of logits; cross
entropy takes them as they are (their log_softmax is themselves, they already sum to one).
"""

import torch
import torch.nn.functional as F
from torch import Tensor


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
