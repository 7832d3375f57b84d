"""Efficient self-attention for the transformer: `model.attention.kind` picks the mechanism that
replaces softmax(Q K^T / sqrt(d_k)) V inside multi-head self-attention.

    kind        mechanism (file)                                 memory   causal  weights
    full        Vaswani et al. 2017 (full.py, fused SDPA)        see (*)  yes     yes
    local       sliding window +-w (sliding_window.py)           O(n w)   yes     yes
    strided     Child et al. 2019 strided/fixed (strided.py)     O(n^2)   yes     yes
    longformer  window + global tokens, Beltagy et al. 2020      O(n(w+g)) no     yes
    linformer   E K, F V to k rows, Wang et al. 2020             O(n k)   no      effective P F
    linear      elu(x)+1 features, Katharopoulos et al. 2020     O(n d)   yes     no
    performer   FAVOR+ random features, Choromanski et al. 2021  O(n m)   yes     no
    bigbird     window + global + random blocks, Zaheer et al.   O(n K b) yes (**) yes
                2020 (bigbird.py)

(*) the fused kernel's memory is O(n) on CPU and with flash/memory-efficient kernels on GPU; the
explicit path (weights) is O(n^2). strided realises its pattern as an n x n mask.
(**) bigbird's causal form (decoder) uses its pattern as an n x n mask, O(n^2); K key blocks of
b positions per query block.

The W^Q, W^K, W^V, W^O projections and the head split stay those of `MultiHeadAttention`; only
its mechanism changes, so every kind has the same parameters apart from the mechanism's own.

The transformer applies the kind to encoder self-attention always and to decoder
self-attention when asked (`model.attention.decoder_self`), which needs a causal mechanism;
cross-attention stays full.
"""

from dataclasses import dataclass, replace

from attnseq.attention.bigbird import BigBirdSelfAttention
from attnseq.attention.full import FullAttention
from attnseq.attention.linear import LinearSelfAttention
from attnseq.attention.linformer import LinformerSelfAttention
from attnseq.attention.longformer import LongformerSelfAttention
from attnseq.attention.mechanism import AttentionMechanism
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.attention.performer import PerformerSelfAttention
from attnseq.attention.sliding_window import SlidingWindowSelfAttention
from attnseq.attention.strided import StridedSelfAttention
from attnseq.config.choices import AttentionKind


@dataclass(frozen=True)
class SelfAttentionOptions:
    """Which self-attention mechanism, and its parameters (unused ones are ignored).

    kind: an `AttentionKind` value.
    window: w, half-width of local and longformer windows.
    stride: l of the strided/fixed patterns; pattern: "strided" or "fixed"; summary: the
        fixed pattern's c.
    global_tokens: g, longformer's global positions (the first g).
    proj_dim: k, linformer's projected length; max_length: n, its longest sequence.
    features: m, performer's random features.
    block_size, window_blocks, global_blocks, random_blocks: bigbird's b, w, g and r;
        seed: seeds its random blocks (`for_layer` gives each layer its own).
    """

    kind: str = "full"
    window: int = 5
    stride: int = 8
    pattern: str = "strided"
    summary: int = 1
    global_tokens: int = 1
    proj_dim: int = 64
    max_length: int = 1024
    features: int = 128
    block_size: int = 16
    window_blocks: int = 1
    global_blocks: int = 1
    random_blocks: int = 2
    seed: int = 0


def for_layer(options: SelfAttentionOptions | None, index: int) -> SelfAttentionOptions | None:
    """The options of layer `index`: seed + index, so that every layer draws its own fixed
    random pattern (bigbird) from the one configured seed."""
    return None if options is None else replace(options, seed=options.seed + index)


def build_mechanism(options: SelfAttentionOptions, d_k: int) -> AttentionMechanism:
    """The mechanism of `options.kind` for heads of size d_k.

    Raises:
        ValueError: for an unknown kind (the message lists the valid ones) or bad parameters.
    """
    kind = options.kind
    if kind == AttentionKind.full.value:
        return FullAttention()
    if kind == AttentionKind.local.value:
        return SlidingWindowSelfAttention(options.window)
    if kind == AttentionKind.strided.value:
        return StridedSelfAttention(options.stride, options.pattern, options.summary)
    if kind == AttentionKind.longformer.value:
        return LongformerSelfAttention(options.window, options.global_tokens)
    if kind == AttentionKind.linformer.value:
        return LinformerSelfAttention(options.max_length, options.proj_dim)
    if kind == AttentionKind.linear.value:
        return LinearSelfAttention()
    if kind == AttentionKind.performer.value:
        return PerformerSelfAttention(d_k, options.features)
    if kind == AttentionKind.bigbird.value:
        return BigBirdSelfAttention(
            options.block_size,
            options.window_blocks,
            options.global_blocks,
            options.random_blocks,
            options.seed,
        )
    valid = ", ".join(member.value for member in AttentionKind)
    raise ValueError(f"unknown self-attention kind {kind!r}; valid: {valid}")


def build_self_attention(
    options: SelfAttentionOptions | None,
    d_model: int,
    heads: int,
    dropout: float = 0.0,
    causal: bool = False,
    memory_slots: int = 0,
) -> MultiHeadAttention:
    """Multi-head self-attention of the given kind (None: full attention).

    Args:
        causal: the module will be used for decoder self-attention.
        memory_slots: N persistent memory vectors per head (full attention only).

    Raises:
        ValueError: for an unknown kind, bad parameters, or a causal use of an encoder-only
            kind (linformer, longformer).
    """
    if options is None:
        options = SelfAttentionOptions()
    mechanism = build_mechanism(options, d_model // heads if heads > 0 else d_model)
    if causal and not mechanism.supports_causal:
        causal_kinds = ", ".join(member.value for member in AttentionKind if member.causal)
        raise ValueError(
            f"attention kind={options.kind} cannot be used for decoder self-attention (it is not "
            f"causal); causal kinds: {causal_kinds}"
        )
    return MultiHeadAttention(
        d_model, heads, dropout, mechanism=mechanism, memory_slots=memory_slots
    )
