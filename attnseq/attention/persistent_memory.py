"""Persistent memory vectors, `model.attention.memory_slots=N` (Sukhbaatar, Grave, Lample, Jegou &
Joulin 2019, "Augmenting Self-attention with Persistent Memory", arXiv:1907.01470, section 3):
N learned key and value vectors per head, M_k and M_v (N x d_k each), concatenated to
the keys and values of every attention call of the layer,

    K' = [M_k ; K W^K],  V' = [M_v ; V W^V],   head = softmax(q K'^T / sqrt(d_k)) V'

They are parameters, not functions of the input: the same for every position and every example
of a batch (so they carry nothing from one example to another), never masked, and outside the
causal mask (a memory slot is not a position, so every query sees all of them). The paper
also drops the feed-forward sublayer (its "all-attention layer"); attnseq keeps it and only adds
the vectors. Initialisation (ours): N(0, 1/d_k) for the keys, so that q . m / sqrt(d_k) starts
at the scale of the sequence's scores, and N(0, 1/N) for the values.

The slots come *before* the sequence's keys: a causal mask aligned bottom-right (the T queries
are the last T of the keys) then lets every query see all N slots and the positions up to its
own, with no change to the causal code, and cached decoding appends new keys after them as usual.

Weights: the attention over N + S keys comes back as (B, H, T, S + N), the sequence's columns
first and the N memory columns last (visualize-alignment labels them m1..mN), or, for
cross-attention, as the S source columns alone, which then sum to one minus the memory's share.

Shapes: B batch, H heads, T queries, S keys, N memory slots, d_k head size.
"""

import torch
from torch import Tensor, nn

from attnseq.attention.mechanism import KeyValue


class PersistentMemory(nn.Module):
    """N learned key and value vectors per head.

    Args:
        heads: H.
        slots: N >= 1.
        d_k: head size.
        show_in_weights: return the memory columns with the weights (self-attention) or only
            the sequence's columns (cross-attention, whose weights feed source alignments).
    """

    def __init__(self, heads: int, slots: int, d_k: int, show_in_weights: bool = True) -> None:
        super().__init__()
        if slots < 1:
            raise ValueError(f"memory slots must be >= 1, got {slots}")
        self.slots = slots
        self.show_in_weights = show_in_weights
        self.keys = nn.Parameter(torch.randn(heads, slots, d_k) * d_k**-0.5)  # M_k (H, N, d_k)
        self.values = nn.Parameter(torch.randn(heads, slots, d_k) * slots**-0.5)  # M_v

    def extra_repr(self) -> str:
        return f"slots={self.slots}, show_in_weights={self.show_in_weights}"

    def prepend(self, keys: Tensor, values: Tensor) -> KeyValue:
        """[M_k ; keys] and [M_v ; values]: (B, H, S, d_k) each -> (B, H, N + S, d_k)."""
        batch = keys.size(0)
        memory_k = self.keys.to(keys.dtype).expand(batch, -1, -1, -1)  # (B, H, N, d_k)
        memory_v = self.values.to(values.dtype).expand(batch, -1, -1, -1)
        return torch.cat([memory_k, keys], dim=2), torch.cat([memory_v, values], dim=2)

    def extend_mask(self, mask: Tensor | None) -> Tensor | None:
        """The mask with N allowed columns in front: (..., S) -> (..., N + S); None stays."""
        if mask is None:
            return None
        return torch.cat([mask.new_ones(*mask.shape[:-1], self.slots), mask], dim=-1)

    def arrange_weights(self, weights: Tensor | None) -> Tensor | None:
        """Weights over [memory ; sequence] (B, H, T, N + S) -> (B, H, T, S + N) with the memory
        columns last, or (B, H, T, S) without them (`show_in_weights`)."""
        if weights is None:
            return None
        sequence = weights[..., self.slots :]
        if not self.show_in_weights:
            return sequence
        return torch.cat([sequence, weights[..., : self.slots]], dim=-1)
