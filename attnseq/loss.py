"""Token-level cross entropy with optional label smoothing (Szegedy et al. 2016, section 7).

Summed over non-padding target tokens; callers divide by the token count they need
("normalised by tokens" in training, mean NLL for validation perplexity).
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
