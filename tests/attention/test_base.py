"""The RNN attention interface (attnseq/attention/base.py): `forward` written once, the
mechanisms filling its hooks."""

import torch
from torch import Tensor

from attnseq.attention import (
    AdditiveAttention,
    Attention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
    ScaledDotAttention,
    padding_mask,
)
from attnseq.attention.additive import CoverageAttention
from attnseq.attention.base import AlignInputs

SCORE_CLASSES = (
    AdditiveAttention,
    DotAttention,
    GeneralAttention,
    ConcatAttention,
    LocationAttention,
    ScaledDotAttention,
)


def test_forward_is_written_once_and_mechanisms_fill_the_hooks() -> None:
    """Only the base class defines `forward`; coverage and local attention fill `align`."""
    for cls in (*SCORE_CLASSES, LocalAttention, CoverageAttention):
        assert "forward" not in vars(cls), cls.__name__
    assert "align" in vars(LocalAttention) and "align" in vars(CoverageAttention)

    class Uniform(Attention):
        """Fills only the scoring hook: equal energies, so uniform weights over allowed keys."""

        def scores(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
            return query.new_zeros(query.size(0), query.size(1), prepared_keys.size(1))

    query, keys, values = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2)
    mask = padding_mask(torch.tensor([5, 2]), 5)
    context, weights = Uniform()(query, keys, values, mask)
    torch.testing.assert_close(weights[1, :, :2], torch.full((3, 2), 0.5))
    assert torch.all(weights[1, :, 2:] == 0)
    torch.testing.assert_close(context[1], values[1, :2].mean(0).expand(3, -1))
    direct = Uniform().align(AlignInputs(query, keys, mask[:, None, :]))
    torch.testing.assert_close(direct, weights)
