"""Masks and masking behaviour of every mechanism: exact zeros, rows summing to one, fully masked
rows without NaN (forward and backward), (B, S) and (B, T, S) masks."""

import pytest
import torch

from attnseq.attention import (
    SCORES,
    WINDOWS,
    Attention,
    build_attention,
    causal_mask,
    masked_softmax,
    padding_mask,
)

DIM = 4
MECHANISMS = [(score, window) for window in WINDOWS for score in SCORES]


def make(score: str, window: str) -> Attention:
    torch.manual_seed(0)
    # D = 8 >= S: the local-m window covers the whole (short) source, so only the mask limits it
    return build_attention(score, DIM, DIM, attn_dim=5, window=window, D=8, max_src_len=8).double()


def inputs(B: int = 3, T: int = 4, S: int = 5, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(B, T, DIM, generator=generator, dtype=torch.float64)
    keys = torch.randn(B, S, DIM, generator=generator, dtype=torch.float64)
    values = torch.randn(B, S, 2, generator=generator, dtype=torch.float64)
    return query, keys, values


def test_padding_mask_values() -> None:
    mask = padding_mask(torch.tensor([3, 1, 0]), 4)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False, False, False, False],
    ]
    assert padding_mask(torch.tensor([2, 1])).shape == (2, 2)  # S defaults to the longest


def test_causal_mask_values() -> None:
    assert causal_mask(3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_masked_softmax_zeros_and_fully_masked_rows(dtype: torch.dtype) -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0], [5.0, -1.0, 0.5]], dtype=dtype, requires_grad=True)
    mask = torch.tensor([[True, False, True], [False, False, False]])
    weights = masked_softmax(scores, mask)
    e1, e3 = torch.tensor(1.0).exp(), torch.tensor(3.0).exp()
    expected = torch.tensor([[e1 / (e1 + e3), 0.0, e3 / (e1 + e3)], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(
        weights.float(), expected, atol=1e-2 if dtype.itemsize == 2 else 1e-6, rtol=0
    )
    assert weights[0, 1] == 0 and torch.all(weights[1] == 0)
    weights.sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.all(scores.grad[1] == 0)


def test_masked_softmax_without_mask_is_softmax() -> None:
    scores = torch.randn(2, 3, 4)
    torch.testing.assert_close(masked_softmax(scores, None), torch.softmax(scores, -1))


@pytest.mark.parametrize(("score", "window"), MECHANISMS)
def test_padding_gets_exactly_zero_and_rows_sum_to_one(score: str, window: str) -> None:
    module = make(score, window)
    query, keys, values = inputs()
    mask = padding_mask(torch.tensor([5, 3, 1]), 5)  # (B, S)
    # padded keys hold garbage that must not leak into the output
    garbage_keys, garbage_values = keys.clone(), values.clone()
    garbage_keys[~mask] = 1e3
    garbage_values[~mask] = 1e3
    context, weights = module(query, keys, values, mask=mask)
    context_g, weights_g = module(query, garbage_keys, garbage_values, mask=mask)
    assert torch.all(weights[~mask[:, None, :].expand(-1, 4, -1)] == 0.0)
    torch.testing.assert_close(weights_g, weights, rtol=0, atol=1e-12)
    torch.testing.assert_close(context_g, context, rtol=0, atol=1e-12)
    sums = weights.sum(-1)  # (B, T)
    if window == "local_p":  # eq. 10 multiplies by a Gaussian <= 1 and does not renormalise
        assert torch.all(sums > 0) and torch.all(sums <= 1.0)
    else:
        torch.testing.assert_close(sums, torch.ones(3, 4, dtype=torch.float64))


@pytest.mark.parametrize(("score", "window"), MECHANISMS)
def test_fully_masked_rows_give_zeros_without_nan(score: str, window: str) -> None:
    module = make(score, window)
    query, keys, values = inputs()
    query.requires_grad_(True)
    keys.requires_grad_(True)
    values.requires_grad_(True)
    # example 2 has no real source token; in example 0 query t=1 may see nothing
    mask = padding_mask(torch.tensor([5, 2, 0]), 5).unsqueeze(1).repeat(1, 4, 1)  # (B, T, S)
    mask[0, 1] = False
    context, weights = module(query, keys, values, mask=mask)
    assert torch.all(weights[2] == 0.0) and torch.all(context[2] == 0.0)
    assert torch.all(weights[0, 1] == 0.0) and torch.all(context[0, 1] == 0.0)
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    (context.square().sum() + weights.sum()).backward()
    grads = [query.grad, values.grad, *(p.grad for p in module.parameters())]
    if score != "location":  # the location score never looks at the keys: no gradient there
        grads.append(keys.grad)
    for grad in grads:
        assert grad is not None and torch.isfinite(grad).all()
    assert torch.all(values.grad[2] == 0.0)  # nothing attended, nothing learned


@pytest.mark.parametrize(("score", "window"), MECHANISMS)
def test_batch_source_mask_equals_expanded_three_dim_mask(score: str, window: str) -> None:
    module = make(score, window)
    query, keys, values = inputs()
    mask = padding_mask(torch.tensor([5, 3, 2]), 5)  # (B, S)
    two_dim = module(query, keys, values, mask=mask)
    three_dim = module(query, keys, values, mask=mask[:, None, :].expand(-1, 4, -1))  # (B, T, S)
    for a, b in zip(two_dim, three_dim, strict=False):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(("score", "window"), [(s, w) for s, w in MECHANISMS if w != "local_p"])
def test_three_dim_mask_with_different_rows(score: str, window: str) -> None:
    """A (B, T, S) mask that differs per query (here: causal, T = S) limits each row."""
    module = make(score, window)
    query, keys, values = inputs(T=5, S=5)
    mask = causal_mask(5).expand(3, 5, 5)  # (B, T, S)
    _, weights = module(query, keys, values, mask=mask)
    assert torch.all(weights[~mask] == 0.0)
    assert weights[:, 0, 0].tolist() == [1.0, 1.0, 1.0]  # the first query sees one key
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5, dtype=torch.float64))
