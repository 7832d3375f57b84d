"""Additive attention (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly
Learning to Align and Translate", ICLR; eq. 6 and appendix A.1.2):

    e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)
    a_ij = softmax_j(e_ij),   c_i = sum_j a_ij h_j

W_a: query projection, U_a: key projection (computed once per batch in `prepare_keys`).
"""

import torch
from torch import Tensor, nn

from attnseq.attention.base import Attention


class AdditiveAttention(Attention):
    """score(s, h) = v^T tanh(W_q s + W_k h).

    Args:
        query_dim: size of the decoder state s.
        key_dim: size of the encoder annotation h.
        attn_dim: size of the hidden layer inside the score (Bahdanau's n').
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W_a
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)  # U_a
        self.energy = nn.Linear(attn_dim, 1, bias=False)  # v_a

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # (B, S, A)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        q = self.query_proj(query)  # (B, T, A)
        hidden = torch.tanh(q.unsqueeze(2) + prepared_keys.unsqueeze(1))  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)
