"""Low-rank self-attention, `model.attention.kind=linformer` (Wang, Li, Khabsa, Fang & Ma 2020,
"Linformer: Self-Attention with Linear Complexity", arXiv:2006.04768, section 4, eq. 7), E and
F (k x n) learned projections along the sequence axis, one pair per layer shared by the heads:

    head_i = softmax(Q W_i^Q (E K W_i^K)^T / sqrt(d_k)) F V W_i^V = P (F V)

Encoder only. Shapes: B batch, H heads, T query positions, S key positions (T == S), d_k head
size, k projected rows, n maximum length.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnseq.attention.mechanism import AttentionMechanism, Heads


class LinformerSelfAttention(AttentionMechanism):
    """Attention over k rows projected from the keys and values by learned E and F.

    Args:
        max_length: n, the longest sequence (columns of E and F).
        proj_dim: k >= 1, the projected length.

    Raises:
        ValueError: for max_length or proj_dim < 1.
    """

    kind = "linformer"
    supports_causal = False

    def __init__(self, max_length: int, proj_dim: int) -> None:
        super().__init__()
        if proj_dim < 1 or max_length < 1:
            raise ValueError(
                f"linformer needs proj_dim >= 1 and max_length >= 1, got {proj_dim} and "
                f"{max_length}"
            )
        self.max_length = max_length
        self.proj_dim = proj_dim
        self.key_proj = nn.Parameter(torch.empty(proj_dim, max_length))  # E
        self.value_proj = nn.Parameter(torch.empty(proj_dim, max_length))  # F
        gain = 1 / math.sqrt(2)  # variance 1 / (n + k): a row sums n keys to about one key's
        nn.init.xavier_uniform_(self.key_proj, gain=gain)
        nn.init.xavier_uniform_(self.value_proj, gain=gain)

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}, proj_dim={self.proj_dim}"

    def projections(self, length: int, key_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """E and F restricted to the first `length` positions, padded columns zeroed.

        Returns:
            two (1 or B, k, S) matrices.
        """
        if length > self.max_length:
            raise ValueError(
                f"linformer attention was built for sequences of at most max_length="
                f"{self.max_length} positions but got {length}; raise model.max_positions"
            )
        e, f = self.key_proj[None, :, :length], self.value_proj[None, :, :length]  # (1, k, S)
        if key_mask is not None:
            real = key_mask[:, None, :].to(e.dtype)  # (B, 1, S)
            e, f = e * real, f * real
        return e, f

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`; the weights are the effective P F_S (B, H, T, S),
        exact since context = P (F V) = (P F) V: possibly negative, rows need not sum to one."""
        q, k, v = inputs.q, inputs.k, inputs.v
        e, f = self.projections(k.size(2), inputs.mask)  # (B|1, k, S)
        projected_k = torch.einsum("bps,bhsd->bhpd", e, k)  # E K: (B, H, k, d_k)
        projected_v = torch.einsum("bps,bhsd->bhpd", f, v)  # F V: (B, H, k, d_k)
        scores = q @ projected_k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, k)
        mapping = torch.softmax(scores, dim=-1)  # P
        dropped = F.dropout(mapping, p=inputs.dropout, training=inputs.dropout > 0)
        context = dropped @ projected_v  # (B, H, T, d_k)
        if not need_weights:
            return context, None
        return context, torch.einsum("bhtp,bps->bhts", mapping, f)  # P F: (B, H, T, S)
