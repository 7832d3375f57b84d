"""Attention mechanisms, one family per file (docs/internals/attention.md is the tour), and
`build_attention`, the RNN attention of the config names `model.attention.score` (`SCORES`: the
config Enum `Score` less "none", which builds no attention) and `model.attention.window`
(`WINDOWS`).
"""

from attnseq.attention.additive import AdditiveAttention
from attnseq.attention.base import Attention
from attnseq.attention.luong import (
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
    ScaledDotAttention,
)
from attnseq.attention.masks import causal_mask, masked_softmax, padding_mask
from attnseq.config.choices import Score, Window

SCORES = tuple(score.value for score in Score if score is not Score.none)  # none: no attention
WINDOWS = tuple(window.value for window in Window)

__all__ = [
    "SCORES",
    "WINDOWS",
    "AdditiveAttention",
    "Attention",
    "ConcatAttention",
    "DotAttention",
    "GeneralAttention",
    "LocalAttention",
    "LocationAttention",
    "ScaledDotAttention",
    "build_attention",
    "causal_mask",
    "masked_softmax",
    "padding_mask",
]


def build_attention(
    score: str,
    query_dim: int,
    key_dim: int,
    *,
    attn_dim: int,
    window: str = "global",
    D: int = 10,
    max_src_len: int = 512,
) -> Attention:
    """Build an attention module from its config names.

    Args:
        score: one of `SCORES`.
        query_dim: size of the decoder state (the query).
        key_dim: size of the encoder state (key); dot and scaled_dot need it equal to query_dim.
        attn_dim: hidden size of the additive/concat score and of local_p's position predictor;
            ignored by the others.
        window: one of `WINDOWS`; "global" attends over every source position.
        D: half-width of a local window (Luong's D); ignored for "global".
        max_src_len: longest source the "location" score can handle; ignored by the others.

    Raises:
        ValueError: for an unknown score or window (the message lists the valid names), for
            dot/scaled_dot with query_dim != key_dim, or for D < 1 with a local window.
    """
    if score not in SCORES:
        raise ValueError(f"unknown attention score {score!r}; valid: {', '.join(SCORES)}")
    if window not in WINDOWS:
        raise ValueError(f"unknown attention window {window!r}; valid: {', '.join(WINDOWS)}")
    content: Attention
    if score == "additive":
        content = AdditiveAttention(query_dim, key_dim, attn_dim)
    elif score == "dot":
        content = DotAttention(query_dim, key_dim)
    elif score == "general":
        content = GeneralAttention(query_dim, key_dim)
    elif score == "concat":
        content = ConcatAttention(query_dim, key_dim, attn_dim)
    elif score == "location":
        content = LocationAttention(query_dim, max_src_len)
    else:
        content = ScaledDotAttention(query_dim, key_dim)
    if window == "global":
        return content
    return LocalAttention(content, window, D=D, query_dim=query_dim, attn_dim=attn_dim)
