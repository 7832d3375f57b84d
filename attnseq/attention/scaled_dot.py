"""Scaled dot-product attention, one head (Vaswani et al. 2017, "Attention Is All You Need",
NeurIPS; eq. 1):

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Dividing by sqrt(d_k) keeps the variance of the energies near one whatever the key size, so the
softmax does not saturate for large d_k (the paper's footnote 4). No projections here: the
multi-head module owns W^Q, W^K, W^V; this is the attention function itself, used as an RNN
attention score where the decoder and encoder states have the same size.

Shapes: B batch, T query (target) positions, S key (source) positions, d_k query/key size.
"""

import math

import torch
from torch import Tensor

from attnseq.attention.base import Attention
from attnseq.attention.multiplicative import check_equal_sizes


class ScaledDotAttention(Attention):
    """score(q, k) = q^T k / sqrt(d_k); no parameters.

    Args:
        query_dim: size of the query q.
        key_dim: size of the key k (d_k); must equal `query_dim`.

    Raises:
        ValueError: if query_dim != key_dim.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        check_equal_sizes("scaled_dot", query_dim, key_dim)
        self.scale = 1.0 / math.sqrt(key_dim)  # a constant of the architecture, not a cache

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, d_k) against keys (B, S, d_k) -> energies (B, T, S)."""
        return torch.bmm(query, prepared_keys.transpose(1, 2)) * self.scale  # (B, T, S)
