"""Kernelized linear attention, `model.attention.kind=linear` (Katharopoulos, Vyas, Pappas &
Fleuret 2020, "Transformers are RNNs: Fast Autoregressive Transformers with Linear Attention",
ICML; sections 3.2-3.3): the kernel functions take any positive feature map (performer.py's
too), and compute in float32, where float16 running sums overflow.

Shapes: B batch, H heads, T query positions, S key positions, F features, d_k head size,
N new positions of a decoding step.
"""

import abc
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from attnseq.attention.mechanism import AttentionMechanism, Heads, SelfCache

CAUSAL_BLOCK = 64  # C: positions per block of the causal prefix sums


def elu_feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, eq. 7); same shape as x."""
    return F.elu(x) + 1.0


def _ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """numerator (..., d) / denominator (..., 1); 0 where the denominator is 0 (then every
    feature of every visible key was 0, i.e. no real key, and the numerator is 0 too)."""
    return numerator / denominator.masked_fill(denominator == 0, 1.0)


def kernel_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, key_log_scale: Tensor | None = None
) -> Tensor:
    """Non-causal linear attention (eq. 5), right to left, O(n F d_k) time:

        V'_i = phi(Q_i)^T (sum_j phi(K_j) V_j^T) / phi(Q_i)^T (sum_j phi(K_j))

    With a per-key log scale c_j (features defined through exp()), the sums are taken relative
    to the largest c_j, which cancels in the ratio, so exp() never overflows.

    Args:
        phi_q: (B, H, T, F) query features.
        phi_k: (B, H, S, F) key features, zero at padded keys.
        v: (B, H, S, d_k).
        key_log_scale: (B, H, S) c_j with phi(K_j) = phi_k[j] exp(c_j), very negative at padded
            keys; None = 0.

    Returns:
        (B, H, T, d_k).
    """
    if key_log_scale is not None:
        # one constant per (B, H) cancels in the ratio: divide by the largest exp(c_j)
        relative = key_log_scale - key_log_scale.amax(dim=-1, keepdim=True)
        phi_k = phi_k * torch.exp(relative)[..., None]
    kv = phi_k.transpose(-2, -1) @ v  # sum_j phi(K_j) V_j^T: (B, H, F, d_k)
    k_sum = phi_k.sum(dim=-2)[..., None]  # sum_j phi(K_j): (B, H, F, 1)
    return _ratio(phi_q @ kv, phi_q @ k_sum)  # (B, H, T, d_k)


def empty_sums(
    batch: int, heads: int, features: int, d_k: int, like: Tensor, scaled: bool
) -> SelfCache:
    """Running sums before any key: S (B, H, F, d_k), Z (B, H, F) and, when the features carry
    a log scale, the scale the sums are relative to (B, H), "minus infinity" (finite, so that
    differences stay defined)."""
    sums = {
        "self_kv": like.new_zeros(batch, heads, features, d_k),
        "self_k_sum": like.new_zeros(batch, heads, features),
    }
    if scaled:
        sums["self_log_scale"] = like.new_full((batch, heads), torch.finfo(like.dtype).min)
    return sums


def causal_kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    sums: SelfCache,
    key_log_scale: Tensor | None = None,
    block: int = CAUSAL_BLOCK,
) -> tuple[Tensor, SelfCache]:
    """Causal linear attention by prefix sums (section 3.3), also an RNN over (S, Z):

        S_i = sum_{j<=i} phi(K_j) V_j^T,   Z_i = sum_{j<=i} phi(K_j)
        V'_i = phi(Q_i)^T S_i / phi(Q_i)^T Z_i

    computed `block` positions at a time (the running sums of earlier blocks plus the block's
    own causal C x C part), not S_i for every i: O(n (F + d_k)) memory. A log scale is kept
    relative to the largest seen so far, the sums rescaled when it grows. The T positions come
    after everything already in `sums` (a decoding step, or a whole target from `empty_sums`).

    Args:
        phi_q: (B, H, T, F).
        phi_k: (B, H, T, F), zero at padded keys.
        v: (B, H, T, d_k).
        sums: from `empty_sums` or a previous call (not modified).
        key_log_scale: (B, H, T) as in `kernel_attention`; needs "self_log_scale" in sums.
        block: C, positions per block.

    Returns:
        (B, H, T, d_k) and the sums including the T new positions.
    """
    kv, k_sum = sums["self_kv"], sums["self_k_sum"]  # (B, H, F, d_k), (B, H, F)
    scale = sums.get("self_log_scale")  # (B, H) or None
    length = phi_q.size(2)
    causal = torch.ones(block, block, dtype=torch.bool, device=phi_q.device).tril()
    outputs = []
    for start in range(0, length, block):
        end = min(start + block, length)
        q_c, k_c, v_c = phi_q[:, :, start:end], phi_k[:, :, start:end], v[:, :, start:end]
        if key_log_scale is not None and scale is not None:
            c = key_log_scale[:, :, start:end]  # (B, H, C)
            new_scale = torch.maximum(scale, c.amax(dim=-1))  # (B, H)
            decay = torch.exp(scale - new_scale)  # <= 1: re-express the sums at the new scale
            kv, k_sum = kv * decay[..., None, None], k_sum * decay[..., None]
            k_c = k_c * torch.exp(c - new_scale[..., None])[..., None]
            scale = new_scale
        size = end - start
        within = (q_c @ k_c.transpose(-2, -1)).masked_fill(~causal[:size, :size], 0.0)  # (.., C, C)
        numerator = q_c @ kv + within @ v_c  # (B, H, C, d_k)
        denominator = q_c @ k_sum[..., None] + within.sum(dim=-1, keepdim=True)  # (B, H, C, 1)
        outputs.append(_ratio(numerator, denominator))
        kv = kv + k_c.transpose(-2, -1) @ v_c
        k_sum = k_sum + k_c.sum(dim=-2)
    new_sums = {"self_kv": kv, "self_k_sum": k_sum}
    if scale is not None:
        new_sums["self_log_scale"] = scale
    return torch.cat(outputs, dim=2), new_sums


def zero_padded(phi_k: Tensor, key_mask: Tensor | None) -> Tensor:
    """Key features (B, H, S, F) with the padded keys' rows set to 0."""
    return phi_k if key_mask is None else phi_k * key_mask[:, None, :, None].to(phi_k.dtype)


class KernelSelfAttention(AttentionMechanism):
    """phi(Q) (phi(K)^T V) / phi(Q) phi(K)^T 1 with the feature map phi of a subclass, causal
    by prefix sums; no weights (phi(Q) phi(K)^T is never formed), so no dropout either. Padded
    keys get phi(K_j) = 0; a row without a real key gives 0, not NaN.

    scaled: the key features carry a per-key log scale (maps defined through exp()).
    """

    has_weights = False
    scaled: ClassVar[bool] = False

    @abc.abstractmethod
    def feature_maps(
        self, q: Tensor, k: Tensor, key_mask: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """phi(q) (B, H, T, F), phi(k) (B, H, S, F) zero at padded keys, and the keys' log
        scale (B, H, S) when `scaled` (else None)."""

    @abc.abstractmethod
    def feature_count(self, d_k: int) -> int:
        """F, the number of features for heads of size d_k."""

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`; there are never weights. Computed in float32 (the
        sums over every key, and a ratio small where a query sees few keys, overflow float16's
        gradients and lose bfloat16's digits); the context has the dtype of v."""
        with _float32(inputs.q):
            q, k, v = inputs.q.float(), inputs.k.float(), inputs.v.float()
            phi_q, phi_k, log_scale = self.feature_maps(q, k, inputs.mask)
            if not inputs.causal:
                context = kernel_attention(phi_q, phi_k, v, log_scale)
            else:
                batch, heads, _, d_k = q.shape
                sums = self.empty_cache(batch, heads, d_k, q)
                context = causal_kernel_attention(phi_q, phi_k, v, sums, log_scale)[0]
        return context.to(inputs.v.dtype), None

    def empty_cache(self, batch: int, heads: int, d_k: int, like: Tensor) -> SelfCache:
        """The running sums before any key (`empty_sums`), float32 on the device of `like`."""
        like = like.new_empty(0, dtype=torch.float32)
        return empty_sums(batch, heads, self.feature_count(d_k), d_k, like, scaled=self.scaled)

    def step(
        self, new: Heads, cache: SelfCache, need_weights: bool = False
    ) -> tuple[Tensor, None, SelfCache]:
        """Add the new positions to the running sums (S, Z): O(F d_k) per position; float32
        like `attend`, the context in the dtype of v."""
        with _float32(new.q):
            q, k, v = new.q.float(), new.k.float(), new.v.float()
            phi_q, phi_k, log_scale = self.feature_maps(q, k, None)
            sums = {name: value.float() for name, value in cache.items()}
            context, sums = causal_kernel_attention(phi_q, phi_k, v, sums, log_scale)
        return context.to(new.v.dtype), None, sums


def _float32(like: Tensor) -> torch.autocast:
    """Autocast off on the device of `like`: the kernel's float32 operations stay float32."""
    return torch.autocast(like.device.type, enabled=False)


class LinearSelfAttention(KernelSelfAttention):
    """Linear attention with phi(x) = elu(x) + 1 (F = d_k features); no parameters."""

    kind = "linear"

    def feature_maps(
        self, q: Tensor, k: Tensor, key_mask: Tensor | None
    ) -> tuple[Tensor, Tensor, None]:
        return elu_feature_map(q), zero_padded(elu_feature_map(k), key_mask), None

    def feature_count(self, d_k: int) -> int:
        return d_k
