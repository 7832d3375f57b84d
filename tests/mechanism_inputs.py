"""What the self-attention mechanism tests share (tests/attention/test_efficient.py and one
test module per kind): per-head inputs, key padding masks, bands, and each kind's small options,
so that every pattern is really sparse at length 40."""

import torch

from attnseq.attention.efficient import build_self_attention
from attnseq.attention.full import FullAttention
from attnseq.attention.masks import padding_mask
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.config.choices import AttentionKind, SparsePattern
from attnseq.config.schema import AttentionConfig

D_MODEL, HEADS, D_K = 32, 4, 8
ATOL = 1e-5
MAX_LENGTH = 64  # linformer's n
OPTIONS = {  # small parameters so that every pattern is really sparse at length 40
    "local": AttentionConfig(kind=AttentionKind.local, D=3),
    "strided": AttentionConfig(kind=AttentionKind.strided, stride=4),
    "fixed": AttentionConfig(
        kind=AttentionKind.strided, stride=5, pattern=SparsePattern.fixed, summary=2
    ),
    "longformer": AttentionConfig(kind=AttentionKind.longformer, D=2, global_tokens=3),
    "linformer": AttentionConfig(kind=AttentionKind.linformer, proj_dim=6),
    "linear": AttentionConfig(kind=AttentionKind.linear),
    "performer": AttentionConfig(kind=AttentionKind.performer, features=32),
    "bigbird": AttentionConfig(
        kind=AttentionKind.bigbird, block_size=4, window_blocks=1, global_blocks=1, random_blocks=2
    ),
}


def qkv(length: int = 40, batch: int = 2, seed: int = 0, scale: float = 1.0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(batch, HEADS, length, D_K, generator=generator) for _ in range(3)]


def lengths_mask(length: int = 40) -> torch.Tensor:
    return padding_mask(torch.tensor([length, length - 9]), length)  # (B, S)


def make(name: str, seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    module = build_self_attention(OPTIONS[name], D_MODEL, HEADS, max_length=MAX_LENGTH)
    assert not isinstance(module.mechanism, FullAttention)
    return module.eval()


def band(length: int, window: int, causal: bool) -> torch.Tensor:
    """|i - j| <= w (or 0 <= i - j <= w), written directly."""
    i = torch.arange(length)
    offset = i[:, None] - i[None, :]
    return (offset >= 0) & (offset <= window) if causal else offset.abs() <= window
