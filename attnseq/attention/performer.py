"""FAVOR+ attention, `model.attention.kind=performer` (Choromanski et al. 2021, "Rethinking
Attention with Performers", ICLR; section 2.3, Lemma 1, and section 2.4): softmax attention as
linear attention (linear.py) with m = `model.attention.features` positive random features,

    phi(x) = exp(-|x|^2 / 2) / sqrt(m) . (exp(w_1 . x), ..., exp(w_m . x)),   w_r ~ N(0, I_d)
    E[phi(x) . phi(y)] = exp(x . y),   x = q / d_k^(1/4),  y = k / d_k^(1/4)          (Lemma 1)

Shapes: B batch, H heads, N positions, d_k head size, m features.
"""

import math

import torch
from torch import Tensor

from attnseq.attention.linear import KernelSelfAttention


def orthogonal_gaussian(features: int, dim: int) -> Tensor:
    """(features, dim) random directions: blocks of `dim` orthogonal rows (QR of a Gaussian
    matrix), each row rescaled to the norm of an independent N(0, I_dim) vector, so that every
    row is marginally N(0, I_dim) (Choromanski et al. 2021, section 2.4)."""
    blocks = []
    for _ in range(math.ceil(features / dim)):
        orthonormal, _ = torch.linalg.qr(torch.randn(dim, dim))
        blocks.append(orthonormal.T)  # rows orthonormal
    directions = torch.cat(blocks)[:features]  # (m, d)
    norms = torch.randn(features, dim).norm(dim=1, keepdim=True)  # chi(dim)-distributed
    return directions * norms


class PerformerSelfAttention(KernelSelfAttention):
    """Softmax attention estimated with m positive orthogonal random features, drawn once when
    the module is built (from the run's seed) and saved with it: one kernel for training,
    evaluation and decoding.

    Args:
        d_k: head size (the dimension of the random directions).
        features: m >= 1.

    Raises:
        ValueError: for features < 1.
    """

    kind = "performer"
    scaled = True

    def __init__(self, d_k: int, features: int) -> None:
        super().__init__()
        if features < 1:
            raise ValueError(f"performer needs features >= 1, got {features}")
        self.features = features
        self.register_buffer("directions", orthogonal_gaussian(features, d_k))  # (m, d_k)

    def extra_repr(self) -> str:
        return f"features={self.features}"

    def log_features(self, x: Tensor) -> Tensor:
        """log phi(x) up to the constant -log(sqrt(m)): w_r . x' - |x'|^2 / 2 with
        x' = x / d_k^(1/4); x (B, H, N, d_k) -> (B, H, N, m)."""
        x = x * x.size(-1) ** -0.25
        projected = x @ self.directions.to(x.dtype).T  # (B, H, N, m)
        return projected - (x * x).sum(dim=-1, keepdim=True) / 2

    def query_features(self, q: Tensor) -> Tensor:
        """phi(q) times exp(-max_r w_r . x), a per-query constant that cancels in the ratio:
        (B, H, N, m), max entry 1, so exp() never overflows."""
        log_phi = self.log_features(q)
        return torch.exp(log_phi - log_phi.amax(dim=-1, keepdim=True))

    def key_features(self, k: Tensor, key_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """phi(k) as (features with max entry 1, their log scale): (B, H, N, m), (B, H, N).

        Padded keys get zero features and the lowest log scale, so they add nothing.
        """
        log_phi = self.log_features(k)
        log_scale = log_phi.amax(dim=-1)  # (B, H, N)
        phi = torch.exp(log_phi - log_scale[..., None])
        if key_mask is not None:
            real = key_mask[:, None, :]  # (B, 1, N)
            phi = phi * real[..., None].to(phi.dtype)
            log_scale = log_scale.masked_fill(~real, torch.finfo(log_scale.dtype).min)
        return phi, log_scale

    def feature_maps(
        self, q: Tensor, k: Tensor, key_mask: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        return self.query_features(q), *self.key_features(k, key_mask)

    def feature_count(self, d_k: int) -> int:
        return self.features
