"""The REINFORCE term of hard attention trained by sampling (`model.attention.hard=reinforce`;
Xu, Ba, Kiros, Cho, Courville, Salakhutdinov, Zemel & Bengio 2015, "Show, Attend and Tell:
Neural Image Caption Generation with Visual Attention", ICML, section 4.1, eq. 11-12).

With s~ the sampled source positions of an example and a the attention distributions:

    dL_s/dW ~ d log p(y | s~, a)/dW
              + lambda_r (log p(y | s~, a) - b) d log p(s~ | a)/dW
              + lambda_e d H[s~]/dW                                            (eq. 12)

The first term is the ordinary cross entropy through the chosen context; this module adds the
other two, as a surrogate loss to minimise:

    - lambda_r sum_b (r_b - b) sum_t log p(s~_bt | a_bt)  -  lambda_e sum_b sum_t H(a_bt)

summed over the real target positions t (like the cross entropy, so that one division by the
token count averages it per token). The reward r_b = -(example b's mean token cross entropy)
is the example's log-likelihood per token (Xu et al. use the sum; the mean keeps the scale of
r independent of the length), detached: it is a number, not a path for gradients. The baseline
b is the moving average b_k = decay b_{k-1} + (1 - decay) mean_b(r_b) over updates (Xu et al.:
decay 0.9); it lives in the model as a buffer (`MovingAverageBaseline`) so that checkpoints and
exact resume carry it, and starts at the first batch's mean reward.

Shapes: B batch, T target positions.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HARD_LOG_PROB = "hard_log_prob"  # extras: (B, T) log p(s~_t | a_t), summed over heads/layers
HARD_ENTROPY = "hard_entropy"  # extras: (B, T) H(a_t), summed the same way
REINFORCE_BASELINE = "reinforce_baseline"  # extras: the model's baseline buffer (0-dim)


class MovingAverageBaseline(nn.Module):
    """The REINFORCE baseline b as a buffer: NaN until the first reward arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("value", torch.tensor(float("nan")))


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
    """The surrogate of eq. 12's last two terms (module docstring), summed over real tokens.

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
    """b <- decay b + (1 - decay) mean(r), in place; the first update sets b = mean(r)."""
    mean = rewards.mean().to(baseline.dtype)
    # torch.where, not an `if`: no host-device synchronisation on a GPU
    baseline.copy_(torch.where(baseline.isnan(), mean, decay * baseline + (1.0 - decay) * mean))
