"""FAVOR+ attention (attnseq/attention/performer.py): the error against softmax attention
shrinking as the features grow, orthogonal Gaussian features, stability for large inputs."""

import pytest
import torch
from mechanism_inputs import D_K, band, lengths_mask, qkv

from attnseq.attention.full import explicit_attention
from attnseq.attention.performer import PerformerSelfAttention, orthogonal_gaussian

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.mark.parametrize("causal", [False, True])
def test_performer_approaches_softmax_attention_as_features_grow(causal: bool) -> None:
    """Mean absolute error against exact softmax attention on one seeded example."""
    q, k, v = qkv(length=50, scale=0.5)
    allowed = band(50, 50, causal=True) if causal else None
    exact, _ = explicit_attention(q, k, v, allowed)
    errors = []
    for features in (16, 256, 4096):
        torch.manual_seed(1)
        approx, _ = PerformerSelfAttention(D_K, features)(q, k, v, None, causal=causal)
        errors.append((approx - exact).abs().mean().item())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.25 * errors[0]
    assert errors[2] < 0.01


def test_performer_features_are_orthogonal_gaussian_blocks() -> None:
    torch.manual_seed(0)
    directions = orthogonal_gaussian(20, D_K)  # blocks of 8, 8, 4 rows
    for block in (directions[:8], directions[8:16], directions[16:]):
        gram = block @ block.T
        torch.testing.assert_close(gram - torch.diag(gram.diagonal()), torch.zeros_like(gram))
    norms = directions.norm(dim=1)
    assert 1.0 < norms.mean().item() < 5.0  # chi(8) lengths, mean ~ 2.74


def test_performer_is_stable_for_large_inputs() -> None:
    """exp() of large log-features would overflow without the stabilisers."""
    q, k, v = qkv(scale=30.0)
    mechanism = PerformerSelfAttention(D_K, 64)
    for causal in (False, True):
        out, _ = mechanism(q, k, v, lengths_mask(), causal=causal)
        assert torch.isfinite(out).all()
