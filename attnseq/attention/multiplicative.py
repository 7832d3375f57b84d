"""Multiplicative ("global") attention scores of Luong, Pham & Manning 2015, "Effective Approaches
to Attention-based Neural Machine Translation", EMNLP; eq. 8:

    score(h_t, h̄_s) = h_t^T h̄_s                        dot
                      h_t^T W_a h̄_s                    general
                      v_a^T tanh(W_a [h_t; h̄_s])       concat

    a_t(s) = softmax_s(score(h_t, h̄_s))   (eq. 7),   c_t = sum_s a_t(s) h̄_s

h_t is the decoder state (the query s in this package's naming), h̄_s an encoder state (a key h).
Everything that depends on the keys only is computed in `prepare_keys`, once per batch, so a
decoder that attends T times does not redo it at every step.

Shapes: B batch, T query (target) positions, S key (source) positions, Dq/Dk query/key sizes,
A the hidden size of the concat score.
"""

import torch
from torch import Tensor, nn

from attnseq.attention.base import Attention


def check_equal_sizes(score: str, query_dim: int, key_dim: int) -> None:
    """Reject a score that compares queries and keys directly when their sizes differ.

    Raises:
        ValueError: if query_dim != key_dim.
    """
    if query_dim != key_dim:
        raise ValueError(
            f"the {score!r} score needs query_dim == key_dim, got {query_dim} != {key_dim}; "
            "use 'general', 'concat' or 'additive', which project the states"
        )


class DotAttention(Attention):
    """score(s, h) = s^T h (Luong eq. 8, "dot"); no parameters.

    Args:
        query_dim: size of the decoder state s.
        key_dim: size of the encoder state h; must equal `query_dim`, the dot product needs it.

    Raises:
        ValueError: if query_dim != key_dim.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        check_equal_sizes("dot", query_dim, key_dim)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, D) against keys (B, S, D) -> energies (B, T, S)."""
        return torch.bmm(query, prepared_keys.transpose(1, 2))  # (B, T, D) x (B, D, S)


class GeneralAttention(Attention):
    """score(s, h) = s^T W_a h (Luong eq. 8, "general").

    W_a (Dq x Dk) is applied to the keys in `prepare_keys`: (W_a h) is then the same for every
    query, so it costs one projection of S vectors per batch instead of one per decoder step.

    Args:
        query_dim: size of the decoder state s (Dq).
        key_dim: size of the encoder state h (Dk).
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        # nn.Linear(Dk, Dq).weight has shape (Dq, Dk): exactly W_a, and key_proj(h) = W_a h.
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)  # W_a

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """keys (B, S, Dk) -> W_a h (B, S, Dq)."""
        return self.key_proj(keys)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, Dq) against W_a h (B, S, Dq) -> energies (B, T, S)."""
        return torch.bmm(query, prepared_keys.transpose(1, 2))  # (B, T, Dq) x (B, Dq, S)


class ConcatAttention(Attention):
    """score(s, h) = v_a^T tanh(W_a [s; h]) (Luong eq. 8, "concat").

    W_a (A x (Dq + Dk)) is stored as its two column blocks, W_a = [W_q | W_k], because
    W_a [s; h] = W_q s + W_k h: the two forms are algebraically identical, and the split lets
    W_k h be computed once per batch in `prepare_keys` instead of concatenating s with every h
    (a (B, T, S, Dq + Dk) tensor) at every step. `concat_weight()` returns the full W_a.

    Args:
        query_dim: size of the decoder state s (Dq).
        key_dim: size of the encoder state h (Dk).
        attn_dim: number of rows of W_a (A), the hidden size of the score.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=False)  # W_q = W_a[:, :Dq]
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)  # W_k = W_a[:, Dq:]
        self.energy = nn.Linear(attn_dim, 1, bias=False)  # v_a

    def concat_weight(self) -> Tensor:
        """The paper's W_a = [W_q | W_k], shape (A, Dq + Dk)."""
        return torch.cat([self.query_proj.weight, self.key_proj.weight], dim=1)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """keys (B, S, Dk) -> W_k h (B, S, A)."""
        return self.key_proj(keys)

    def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """query (B, T, Dq) against W_k h (B, S, A) -> energies (B, T, S)."""
        q = self.query_proj(query)  # (B, T, A)
        # (B, T, 1, A) + (B, 1, S, A): W_q s + W_k h for every (t, s) pair
        hidden = torch.tanh(q.unsqueeze(2) + prepared_keys.unsqueeze(1))  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)
