"""Attention kernels on the device under test: the fused SDPA kernels serve the transformer's
training path, and BigBird's block-sparse path equals its masked softmax there."""

import pytest
import torch

from attnseq.attention.bigbird import BigBirdSelfAttention
from attnseq.attention.masks import padding_mask

pytestmark = pytest.mark.gpu


def test_fast_attention_path_uses_a_fused_kernel(cuda_device: torch.device) -> None:
    """On CUDA the training path's SDPA call runs the flash or memory-efficient kernel, not the
    math fallback: with the math backend disabled it must still run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnseq.attention.multihead import MultiHeadAttention

    attention = MultiHeadAttention(64, 4).to(cuda_device, torch.bfloat16)
    x = torch.randn(8, 50, 64, device=cuda_device, dtype=torch.bfloat16)
    mask = torch.ones(8, 50, dtype=torch.bool, device=cuda_device)
    mask[:, 40:] = False
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        fused, _ = attention(x, x, x, mask)  # padding mask: memory-efficient kernel
        causal, _ = attention(x, x, x, is_causal=True)  # square causal, no mask: flash
    explicit, _ = attention(x, x, x, mask, need_weights=True)
    assert torch.allclose(fused.float(), explicit.float(), atol=2e-2)
    assert torch.isfinite(causal).all()


def test_block_sparse_path_equals_the_masked_softmax(device: torch.device) -> None:
    """BigBird's fused kernel that serves the global rows is a GPU kernel on CUDA."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 300, 8, generator=generator).to(device) for _ in range(3))
    mask = padding_mask(torch.tensor([300, 211]), 300).to(device)
    mechanism = BigBirdSelfAttention(16, window_blocks=1, global_blocks=1, random_blocks=2)
    explicit, _ = mechanism(q, k, v, mask, need_weights=True)
    fast, _ = mechanism(q, k, v, mask)
    torch.testing.assert_close(fast, explicit, atol=1e-4, rtol=0)
