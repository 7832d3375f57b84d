"""Linformer self-attention (attnseq/attention/linformer.py): softmax over projected keys and
values, its effective weights, and sequences longer than its projection refused."""

import math

import pytest
import torch
from mechanism_inputs import ATOL, D_K, HEADS, lengths_mask, qkv

from attnseq.attention.linformer import LinformerSelfAttention

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def test_linformer_is_softmax_over_projected_keys_and_values() -> None:
    torch.manual_seed(0)
    mechanism = LinformerSelfAttention(max_length=64, proj_dim=6)
    q, k, v = qkv()
    mask = lengths_mask()
    context, weights = mechanism(q, k, v, mask, need_weights=True)
    real = mask[:, None, :, None].float()  # (B, 1, S, 1): padded rows zeroed before projecting
    projected_k = mechanism.key_proj[:, :40] @ (k * real)  # E K: (B, H, k, d_k)
    projected_v = mechanism.value_proj[:, :40] @ (v * real)  # F V
    mapping = torch.softmax(q @ projected_k.transpose(-2, -1) / math.sqrt(D_K), dim=-1)
    torch.testing.assert_close(context, mapping @ projected_v, atol=ATOL, rtol=0)
    # effective weights P F: the exact linear map from values to the context
    assert weights is not None and weights.shape == (2, HEADS, 40, 40)
    torch.testing.assert_close(weights @ v, context, atol=ATOL, rtol=0)
    assert torch.all(weights[1, ..., 31:] == 0)  # padded keys contribute nothing


def test_linformer_rejects_sequences_longer_than_its_projection() -> None:
    q, k, v = qkv(length=70)
    with pytest.raises(ValueError, match="max_length=64"):
        LinformerSelfAttention(max_length=64, proj_dim=6)(q, k, v, None)
