"""Hard attention, `model.attention.hard`: the context is the value of one chosen source
position (the mean of `model.attention.hard_k`), chosen from p(s_i = j) = a_ij (Xu et al. 2015,
"Show, Attend and Tell", ICML, section 4.1, eq. 8); training samples, evaluation takes the
argmax, and a row without allowed positions gets zero weights.

Shapes: "..." any leading dimensions (B, T for the RNN attention; B, H, T for a transformer's
cross-attention), S source positions.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnseq.attention.base import AlignInputs, Attention, ScoreWrapper
from attnseq.attention.masks import as_attention_mask
from attnseq.attention.mechanism import AttentionMechanism, Heads

HARD_MODES = ("gumbel", "reinforce")


@dataclass(frozen=True)
class HardSample:
    """One hard choice per query.

    weights: (..., S) k-hot / k (the count of allowed chosen positions); in gumbel training
        it carries the straight-through gradient.
    log_prob: (...) log-probability of the sample (reinforce training), else None.
    entropy: (...) entropy of a (reinforce training), else None.
    """

    weights: Tensor
    log_prob: Tensor | None = None
    entropy: Tensor | None = None


def _log_alpha(scores: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """log a = log_softmax of the allowed energies, and the mask expanded to (..., S).

    Masked energies are filled with the most negative finite number (as `masked_softmax`), so
    log a stays finite: fully masked rows give a finite uniform row, zeroed by the callers.
    """
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    mask = mask.expand_as(scores)
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.log_softmax(filled.float(), dim=-1), mask


def top_k_weights(keys: Tensor, mask: Tensor, k: int) -> Tensor:
    """k-hot / count over the k largest keys among the allowed positions.

    Args:
        keys: (..., S) ranking keys (log a, or log a + g).
        mask: bool (..., S), True = allowed.
        k: positions to choose (at most S are).

    Returns:
        (..., S) weights: 1/c on the c = min(k, allowed) chosen positions, 0 elsewhere.
    """
    k = min(k, keys.size(-1))
    ranked = keys.masked_fill(~mask, -math.inf)
    chosen = ranked.topk(k, dim=-1).indices  # (..., k)
    hot = torch.zeros_like(keys).scatter_(-1, chosen, 1.0) * mask  # a masked pick counts 0
    return hot / hot.sum(dim=-1, keepdim=True).clamp_min(1.0)


def gumbel_noise(like: Tensor) -> Tensor:
    """g = -log(-log u), u ~ U(0, 1), shaped like `like` (Jang et al. 2017, section 2)."""
    tiny = torch.finfo(like.dtype).tiny
    uniform = torch.rand_like(like).clamp(tiny, 1.0 - 1e-7)
    return -torch.log(-torch.log(uniform))


def straight_through_gumbel(
    scores: Tensor, mask: Tensor | None, temperature: float | Tensor, k: int = 1
) -> HardSample:
    """Straight-through Gumbel-softmax (Jang, Gu & Poole 2017, "Categorical Reparameterization
    with Gumbel-Softmax", ICLR, eqs. 1-2 and section 2.2; Maddison, Mnih & Teh 2017, "The
    Concrete Distribution", ICLR):

        y_soft = softmax((log a + g) / tau),   y_hard = k-hot of the top k of log a + g
        y = y_hard + (y_soft - stopgrad(y_soft)): the value of y_hard, the gradient of y_soft

    Args:
        scores: (..., S) energies e.
        mask: bool broadcastable to scores, True = allowed, or None.
        temperature: tau > 0 of y_soft (a float, or a 0-dim tensor: no host sync).
        k: positions per query.
    """
    log_alpha, mask = _log_alpha(scores, mask)
    perturbed = log_alpha + gumbel_noise(log_alpha)  # (..., S)
    soft_logits = (perturbed / temperature).masked_fill(~mask, torch.finfo(log_alpha.dtype).min)
    y_soft = torch.softmax(soft_logits, dim=-1) * mask  # (..., S)
    y_hard = top_k_weights(perturbed.detach(), mask, k)
    return HardSample((y_hard + (y_soft - y_soft.detach())).to(scores.dtype))


def reinforce_sample(scores: Tensor, mask: Tensor | None, k: int = 1) -> HardSample:
    """Sample k positions without replacement from a, for the score-function estimator (Xu et
    al. 2015, section 4.1, eqs. 11-12): the weights carry no gradient, the scores learn from
    the sample's log-probability (the REINFORCE term of the loss) and the entropy H(a).

    The sample is Gumbel-top-k (Kool, van Hoof & Welling 2019, "Stochastic Beams and Where to
    Find Them", ICML, section 3), whose ordered sample s_1..s_k has the Plackett-Luce
    probability prod_i a_{s_i} / (1 - sum_{j<i} a_{s_j}).

    Args:
        scores: (..., S) energies e.
        mask: bool broadcastable to scores, True = allowed, or None.
        k: positions per query.
    """
    log_alpha, mask = _log_alpha(scores, mask)
    k = min(k, scores.size(-1))
    keys = (log_alpha + gumbel_noise(log_alpha)).detach().masked_fill(~mask, -math.inf)
    order = keys.topk(k, dim=-1).indices  # (..., k): the ordered sample (Gumbel-top-k)
    valid = mask.gather(-1, order)  # (..., k): a pick beyond the allowed positions is void
    picked = log_alpha.gather(-1, order)  # (..., k): log a_{s_i}
    probability = picked.exp() * valid
    # log (1 - sum_{j<i} a_{s_j}): the mass left before the i-th draw
    taken = torch.cumsum(probability, dim=-1) - probability  # (..., k)
    remaining = torch.log1p(-taken.clamp(max=1.0 - 1e-6))
    log_prob = torch.where(valid, picked - remaining, 0.0).sum(dim=-1)  # (...)
    alpha = log_alpha.exp() * mask
    entropy = -(alpha * log_alpha.masked_fill(~mask, 0.0)).sum(dim=-1)  # (...)
    weights = torch.zeros_like(log_alpha).scatter_(-1, order, 1.0) * mask
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1.0)
    return HardSample(weights.to(scores.dtype), log_prob, entropy)


def argmax_sample(scores: Tensor, mask: Tensor | None, k: int = 1) -> HardSample:
    """The k most probable positions (evaluation and decoding): k-hot / k, no gradient."""
    log_alpha, mask = _log_alpha(scores, mask)
    return HardSample(top_k_weights(log_alpha.detach(), mask, k).to(scores.dtype))


class HardSelector(nn.Module):
    """The hard choice of one attention: sample (training) or argmax (evaluation).

    The Gumbel temperature is a non-persistent buffer that the training step sets before each
    forward pass (`set_temperature`): not in the checkpoint, never read by evaluation.

    Args:
        mode: "gumbel" or "reinforce".
        k: positions per query (top-k), >= 1.
    """

    def __init__(self, mode: str, k: int = 1) -> None:
        super().__init__()
        if mode not in HARD_MODES:
            raise ValueError(f"hard attention mode must be one of {HARD_MODES}, got {mode!r}")
        if k < 1:
            raise ValueError(f"hard attention needs k >= 1 positions per query, got {k}")
        self.mode = mode
        self.k = k
        self.register_buffer("temperature", torch.tensor(1.0), persistent=False)

    def forward(self, scores: Tensor, mask: Tensor | None) -> HardSample:
        """Energies (..., S) and a bool mask broadcastable to them -> the `HardSample`."""
        if not self.training:
            return argmax_sample(scores, mask, self.k)
        if self.mode == "gumbel":
            return straight_through_gumbel(scores, mask, self.temperature, self.k)
        return reinforce_sample(scores, mask, self.k)


def set_temperature(model: nn.Module, temperature: float) -> None:
    """Set tau of every `HardSelector` in `model` (no-op for models without hard attention)."""
    for module in model.modules():
        if isinstance(module, HardSelector):
            module.temperature.fill_(temperature)


class HardAttention(ScoreWrapper):
    """An RNN attention score (additive, dot, general, ...) with a hard choice in place of the
    softmax average: `forward` returns the context of the chosen position(s) and the k-hot
    weights (B, T, S).

    Args:
        content: the score module (its `prepare_keys` and `scores`).
        mode: "gumbel" or "reinforce".
        k: positions per query.
    """

    def __init__(self, content: Attention, mode: str, k: int = 1) -> None:
        super().__init__(content)
        self.selector = HardSelector(mode, k)

    def sample(self, inputs: AlignInputs) -> HardSample:
        """The hard choice (and, for reinforce in training, its log-probability (B, T) and
        entropy (B, T)) for one call's inputs."""
        return self.selector(self.scores(inputs.query, inputs.keys), inputs.mask)

    def align(self, inputs: AlignInputs) -> Tensor:
        """k-hot weights (B, T, S): the chosen positions."""
        return self.sample(inputs).weights


class HardCrossAttention(AttentionMechanism):
    """A transformer cross-attention function that attends to the chosen position(s) of each
    head: energies q k^T / sqrt(d_k) (Vaswani et al. 2017, eq. 1), a hard choice per head and
    query, context = weights @ v. There is no fused path (the choice needs the energies), and
    no dropout on the weights (dropping the one chosen position would leave no context).

    Args:
        mode, k: as in `HardSelector`.
    """

    kind = "hard"
    supports_causal = False
    self_attention_only = False

    def __init__(self, mode: str, k: int = 1) -> None:
        super().__init__()
        self.selector = HardSelector(mode, k)

    def sample(self, inputs: Heads) -> HardSample:
        """The hard choice per head: weights (B, H, T, S), log_prob and entropy (B, H, T)."""
        scores = inputs.q @ inputs.k.transpose(-2, -1) / math.sqrt(inputs.q.size(-1))
        return self.selector(scores, as_attention_mask(inputs.mask))

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Context (B, H, T, d_k) of the chosen positions, and their weights if asked."""
        weights = self.sample(inputs).weights  # (B, H, T, S)
        return weights @ inputs.v, weights if need_weights else None
