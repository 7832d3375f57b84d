"""Block-sparse attention with window, global and random blocks, `model.attention.kind=bigbird`
(Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences", NeurIPS; section 2, the ITC
variant, whose global tokens are existing positions): a_ij = softmax_j(q_i . k_j / sqrt(d_k))
over the key blocks `block_pattern` allows query i's block, 0 elsewhere.

Shapes: B batch, H heads, T query positions, S key positions (T == S == N in the encoder),
d_k head size, b block size, nb = ceil(N / b) blocks, K key blocks per query block.
"""

import functools
import math
import random

import torch
import torch.nn.functional as F
from torch import Tensor

from attnseq.attention.full import explicit_attention, fused_attention
from attnseq.attention.masks import as_attention_mask, masked_softmax
from attnseq.attention.mechanism import AttentionMechanism, Heads


def _random_choice(candidates: list[int], count: int, seed_text: str) -> list[int]:
    """`count` of the candidates (all when fewer) drawn by a generator seeded from text, which
    Python hashes the same way in every process."""
    return random.Random(seed_text).sample(candidates, min(count, len(candidates)))


@functools.lru_cache(maxsize=256)
def block_pattern(
    blocks: int, window: int, global_blocks: int, random_blocks: int, seed: int, causal: bool
) -> Tensor:
    """Bool (nb, nb) block pattern, True where query block I may attend to key block J:

        window  |I - J| <= w                 (causal: I - w <= J <= I)
        global  J < g, and every J for I < g (causal: the global blocks are keys only)
        random  J in R(I), r blocks drawn among those not in I's window or global blocks
                (causal: among the earlier blocks g <= J < I - w)

    R(I) comes from a generator seeded by (seed, nb, I), or by (seed, I) alone when causal, so
    that a row's pattern does not depend on how long the sequence will grow. On the host,
    where the Python loop below writes it (a few writes per row, each a kernel launch on a
    GPU); callers move it. Cached: callers must not modify it."""
    allowed = torch.zeros(blocks, blocks, dtype=torch.bool, device="cpu")
    g = min(global_blocks, blocks)
    for row in range(blocks):
        low, high = max(row - window, 0), row if causal else min(row + window, blocks - 1)
        allowed[row, low : high + 1] = True  # the window
        allowed[row, :g] = True  # the global columns
        if row < g:
            allowed[row] = True  # a global row sees every block (the causal mask cuts it)
            continue
        if causal:
            candidates = list(range(g, row - window))
            chosen = _random_choice(candidates, random_blocks, f"bigbird {seed} causal {row}")
        else:
            candidates = [j for j in range(g, blocks) if abs(j - row) > window]
            chosen = _random_choice(candidates, random_blocks, f"bigbird {seed} {blocks} {row}")
        allowed[row, chosen] = True
    return allowed


def bigbird_mask(
    query_positions: Tensor,
    key_positions: Tensor,
    pattern: Tensor,
    block_size: int,
    causal: bool,
) -> Tensor:
    """Bool (T, S) mask of the block pattern (nb, nb) at token level, True = allowed.

    Args:
        query_positions: (T,) absolute positions i; key_positions: (S,) positions j.
        causal: also require j <= i.
    """
    pattern = pattern.to(query_positions.device)
    rows = pattern[query_positions // block_size]  # (T, nb)
    allowed = rows[:, key_positions // block_size]  # (T, S)
    if causal:
        allowed = allowed & (key_positions[None, :] <= query_positions[:, None])
    return allowed


class BigBirdSelfAttention(AttentionMechanism):
    """Window, global and random blocks (Zaheer et al. 2020, section 2, ITC).

    Args:
        block_size: b >= 1 positions per block.
        window_blocks: w >= 0 neighbour blocks on each side (causal: before).
        global_blocks: g >= 0 global blocks at the start of the sequence.
        random_blocks: r >= 0 random blocks per query block.
        seed: seeds the random blocks.

    Raises:
        ValueError: for a block size < 1 or a negative count.
    """

    kind = "bigbird"

    def __init__(
        self,
        block_size: int,
        window_blocks: int = 1,
        global_blocks: int = 1,
        random_blocks: int = 2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        for name, value in (
            ("window_blocks", window_blocks),
            ("global_blocks", global_blocks),
            ("random_blocks", random_blocks),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.block_size = block_size
        self.window_blocks = window_blocks
        self.global_blocks = global_blocks
        self.random_blocks = random_blocks
        self.seed = seed

    def extra_repr(self) -> str:
        return (
            f"block_size={self.block_size}, window_blocks={self.window_blocks}, "
            f"global_blocks={self.global_blocks}, random_blocks={self.random_blocks}, "
            f"seed={self.seed}"
        )

    def pattern(self, length: int, causal: bool) -> Tensor:
        """The (nb, nb) block pattern of a sequence of `length` real positions."""
        blocks = -(-length // self.block_size)
        return block_pattern(
            blocks,
            self.window_blocks,
            self.global_blocks,
            self.random_blocks,
            self.seed,
            causal,
        )

    def batch_pattern(self, key_mask: Tensor | None, length: int, device: torch.device) -> Tensor:
        """Each example's non-causal block pattern, drawn for its own number of real blocks so
        that padding changes nothing: (B, nb, nb) (padding blocks all False), or (1, nb, nb)
        without a mask. The mask is a right-padded (B, S) key padding mask."""
        blocks = -(-length // self.block_size)
        if key_mask is None:
            return self.pattern(length, causal=False).to(device)[None]
        lengths = key_mask.sum(dim=1).tolist()  # real positions per example
        # filled on the host from the host patterns of `pattern`, then moved in one copy
        patterns = torch.zeros(len(lengths), blocks, blocks, dtype=torch.bool, device="cpu")
        for real in set(lengths):
            own = self.pattern(real, causal=False)  # (nb_i, nb_i)
            rows = [i for i, value in enumerate(lengths) if value == real]
            patterns[rows, : own.size(0), : own.size(0)] = own
        return patterns.to(device)

    def mask(
        self,
        query_len: int,
        key_len: int,
        causal: bool,
        key_mask: Tensor | None,
        device: torch.device,
    ) -> Tensor:
        """The token mask (B|1, 1, T, S); the T queries are the last T of the S positions."""
        positions = torch.arange(key_len, device=device)  # (S,)
        queries = positions[key_len - query_len :]
        if causal:
            pattern = self.pattern(key_len, causal=True)
            return bigbird_mask(queries, positions, pattern, self.block_size, True)[None, None]
        patterns = self.batch_pattern(key_mask, key_len, device)  # (B|1, nb, nb)
        blocks = patterns[:, (queries // self.block_size)]  # (B|1, T, nb)
        return blocks[:, :, positions // self.block_size][:, None]  # (B|1, 1, T, S)

    def attend(self, inputs: Heads, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """See `AttentionMechanism.attend`: block-sparse for the encoder without weights, the
        (T, S) mask otherwise (T < S in a decoding step over every key so far)."""
        q, k, v = inputs.q, inputs.k, inputs.v
        if not (need_weights or inputs.causal):
            return self.blocked(inputs), None
        mask = self.mask(q.size(2), k.size(2), inputs.causal, inputs.mask, q.device)
        padding = as_attention_mask(inputs.mask)
        mask = mask if padding is None else mask & padding  # (B|1, 1, T, S)
        if need_weights:
            return explicit_attention(q, k, v, mask, inputs.dropout)
        return fused_attention(q, k, v, mask, inputs.dropout), None

    def blocked(self, inputs: Heads) -> Tensor:
        """Non-causal context (B, H, N, d_k) at O(N K b) memory: each query block attends over
        the K b keys of its K key blocks, the g global rows over every key (fused)."""
        q, k, v, key_mask = inputs.q, inputs.k, inputs.v, inputs.mask
        batch, heads, length, d_k = q.shape
        b = self.block_size
        blocks = -(-length // b)
        if min(self.global_blocks, blocks) * b >= length:
            # every row is a global row, which attends to every key: nothing is block-sparse,
            # and b x b blocks padded past a short sequence would only waste memory
            return fused_attention(q, k, v, as_attention_mask(key_mask), inputs.dropout)
        patterns = self.batch_pattern(key_mask, length, q.device)  # (B|1, nb, nb)
        pad = blocks * b - length
        if key_mask is None:
            key_mask = torch.ones(batch, length, dtype=torch.bool, device=q.device)
        real = F.pad(key_mask, (0, pad)).view(batch, blocks, b)  # (B, nb, b)
        g = min(self.global_blocks, blocks)
        # the key blocks of each row, allowed ones first: (B|1, nb, K) indices and validity
        width = max(int(patterns[:, g:].sum(-1).max()), 1) if g < blocks else 1
        order = torch.argsort((~patterns).to(torch.int8), dim=-1, stable=True)[..., :width]
        valid = patterns.gather(-1, order)  # (B|1, nb, K)
        order = order.expand(batch, -1, -1)
        rows = torch.arange(batch, device=q.device)[:, None, None]  # (B, 1, 1)

        def gathered(x: Tensor) -> Tensor:  # (B, H, N, d_k) -> (B, H, nb, K b, d_k)
            x = F.pad(x, (0, 0, 0, pad)).view(batch, heads, blocks, b, d_k)
            x = x[rows, :, order]  # (B, nb, K, H, b, d_k)
            return x.permute(0, 3, 1, 2, 4, 5).reshape(batch, heads, blocks, width * b, d_k)

        keys, values = gathered(k), gathered(v)
        queries = F.pad(q, (0, 0, 0, pad)).view(batch, heads, blocks, b, d_k)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(d_k)  # (B, H, nb, b, K b)
        allowed = valid[..., None] & real[rows, order]  # (B, nb, K, b)
        allowed = allowed.reshape(batch, 1, blocks, 1, width * b)
        weights = masked_softmax(scores, allowed)
        weights = F.dropout(weights, p=inputs.dropout, training=inputs.dropout > 0)
        context = (weights @ values).reshape(batch, heads, blocks * b, d_k)[:, :, :length]
        # the global rows attend to every key
        global_rows = min(g * b, length)
        if global_rows == 0:
            return context
        global_context = fused_attention(
            q[:, :, :global_rows], k, v, as_attention_mask(inputs.mask), inputs.dropout
        )  # (B, H, g b, d_k)
        return torch.cat([global_context, context[:, :, global_rows:]], dim=2)
