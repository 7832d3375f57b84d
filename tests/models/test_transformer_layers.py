"""The transformer's layers (attnseq/models/transformer_layers.py): encoder self-attention is
permutation-equivariant without positions, and the convolution sublayer sees k neighbours."""

import pytest
import torch

from attnseq.attention.masks import padding_mask
from attnseq.models.transformer_layers import ConvolutionModule, LayerOptions, TransformerEncoder

ATOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def test_encoder_self_attention_is_permutation_equivariant() -> None:
    """Without positional encodings, permuting the source permutes the encoder output."""
    torch.manual_seed(0)
    options = LayerOptions(
        d_model=32, heads=2, ff_dim=64, dropout=0.0, attention_dropout=0.0, pre_norm=True
    )
    encoder = TransformerEncoder(2, options).eval()
    x = torch.randn(2, 6, 32)  # (B, S, d_model)
    mask = padding_mask(torch.tensor([6, 4]), 6)  # (B, S)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    for need_weights in (False, True):
        out, _ = encoder(x, mask, need_weights)
        permuted, _ = encoder(x[:, perm], mask[:, perm], need_weights)
        torch.testing.assert_close(permuted, out[:, perm], atol=ATOL, rtol=0)


def test_convolution_sees_k_neighbours() -> None:
    """Changing position 5 changes the module's output at 5 - k // 2 .. 5 + k // 2 only."""
    torch.manual_seed(0)
    module = ConvolutionModule(8, kernel=3, dropout=0.0)
    x = torch.randn(1, 10, 8)
    changed = x.clone()
    changed[0, 5] += 1.0
    difference = (module(changed, None) - module(x, None)).abs().sum(-1)[0]
    assert torch.all(difference[4:7] > 0)
    assert torch.all(difference[:4] == 0) and torch.all(difference[7:] == 0)
    with pytest.raises(ValueError, match="odd"):
        ConvolutionModule(8, kernel=4, dropout=0.0)
