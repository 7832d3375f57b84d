"""Efficient self-attention for the transformer: `model.attention.kind` picks the mechanism that
replaces full attention inside multi-head self-attention (of the encoder always, of the decoder
with `model.attention.decoder_self`; cross-attention stays full), with the same W^Q, W^K, W^V,
W^O projections.
"""

from dataclasses import replace

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
from attnseq.config.schema import AttentionConfig


def for_layer(options: AttentionConfig | None, index: int) -> AttentionConfig | None:
    """The options of layer `index`: pattern_seed + index, so that every layer draws its own
    fixed random pattern (bigbird) from the one configured seed."""
    return None if options is None else replace(options, pattern_seed=options.pattern_seed + index)


def build_mechanism(
    options: AttentionConfig, d_k: int, max_length: int = 1024
) -> AttentionMechanism:
    """The mechanism of `options.kind` for heads of size d_k, from the keys of
    `model.attention` that kind reads; `max_length`: linformer's n, the longest sequence it
    projects.

    Raises:
        ValueError: for an unknown kind (the message lists the valid ones) or bad parameters.
    """
    kind = options.kind
    if kind is AttentionKind.full:
        return FullAttention()
    if kind is AttentionKind.local:
        return SlidingWindowSelfAttention(options.D)
    if kind is AttentionKind.strided:
        return StridedSelfAttention(options.stride, options.pattern.value, options.summary)
    if kind is AttentionKind.longformer:
        return LongformerSelfAttention(options.D, options.global_tokens)
    if kind is AttentionKind.linformer:
        return LinformerSelfAttention(max_length, options.proj_dim)
    if kind is AttentionKind.linear:
        return LinearSelfAttention()
    if kind is AttentionKind.performer:
        return PerformerSelfAttention(d_k, options.features)
    if kind is AttentionKind.bigbird:
        return BigBirdSelfAttention(
            options.block_size,
            options.window_blocks,
            options.global_blocks,
            options.random_blocks,
            options.pattern_seed,
        )
    valid = ", ".join(member.value for member in AttentionKind)
    raise ValueError(f"unknown self-attention kind {kind!r}; valid: {valid}")


def build_self_attention(
    options: AttentionConfig | None,
    d_model: int,
    heads: int,
    dropout: float = 0.0,
    causal: bool = False,
    memory_slots: int = 0,
    max_length: int = 1024,
    scaled: bool = True,
) -> MultiHeadAttention:
    """Multi-head self-attention of the kind `options` give (None: full attention).

    Args:
        causal: the module will be used for decoder self-attention.
        memory_slots: N persistent memory vectors per head (full attention only).
        max_length: linformer's n, the longest sequence (the model's max_positions).
        scaled: divide q . k by sqrt(d_k) (False: unscaled; attention/multihead.py).

    Raises:
        ValueError: for an unknown kind, bad parameters, or a causal use of an encoder-only
            kind (linformer, longformer).
    """
    if options is None:
        options = AttentionConfig()
    mechanism = build_mechanism(options, d_model // heads if heads > 0 else d_model, max_length)
    if causal and not mechanism.supports_causal:
        causal_kinds = ", ".join(member.value for member in AttentionKind if member.causal)
        raise ValueError(
            f"attention kind={options.kind.value} cannot be used for decoder self-attention "
            f"(it is not causal); causal kinds: {causal_kinds}"
        )
    return MultiHeadAttention(
        d_model, heads, dropout, mechanism=mechanism, memory_slots=memory_slots, scaled=scaled
    )
