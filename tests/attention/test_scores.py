"""Every RNN score (additive.py, luong.py) built by the registry (attnseq/attention/__init__.py)
against its formula, computed here one (t, s) pair at a time with the module's own parameters;
gradchecks; purity; the registry's names and errors; location's and concat's own forms."""

import math

import pytest
import torch
from helpers import gradcheck_module
from torch import Tensor

from attnseq.attention import (
    SCORES,
    WINDOWS,
    AdditiveAttention,
    Attention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    LocationAttention,
    ScaledDotAttention,
    build_attention,
    padding_mask,
)

SAME_DIM_SCORES = ("dot", "scaled_dot")  # need query_dim == key_dim
CLASSES = {
    "additive": AdditiveAttention,
    "dot": DotAttention,
    "general": GeneralAttention,
    "concat": ConcatAttention,
    "location": LocationAttention,
    "scaled_dot": ScaledDotAttention,
}


def dims(score: str) -> tuple[int, int]:
    """(query_dim, key_dim): different sizes wherever the score allows it."""
    return (4, 4) if score in SAME_DIM_SCORES else (5, 3)


def make(score: str, window: str = "global", seed: int = 0) -> Attention:
    torch.manual_seed(seed)
    query_dim, key_dim = dims(score)
    module = build_attention(
        score, query_dim, key_dim, attn_dim=6, window=window, D=2, max_src_len=9
    )
    return module.double()


def inputs(score: str, B: int = 2, T: int = 3, S: int = 4, Dv: int = 2, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    query_dim, key_dim = dims(score)
    query = torch.randn(B, T, query_dim, generator=generator, dtype=torch.float64)
    keys = torch.randn(B, S, key_dim, generator=generator, dtype=torch.float64)
    values = torch.randn(B, S, Dv, generator=generator, dtype=torch.float64)
    return query, keys, values


def reference_energy(module: Attention, score: str, s: Tensor, h: Tensor, j: int) -> float:
    """The score formula for one decoder state s (Dq,) and one encoder state h (Dk,) at j."""
    with torch.no_grad():  # plain numbers: the reference needs no graph
        return _reference_energy(module, score, s, h, j)


def _reference_energy(module: Attention, score: str, s: Tensor, h: Tensor, j: int) -> float:
    if score == "additive":  # Bahdanau eq. 6: v^T tanh(W s + U h)
        hidden = torch.tanh(module.query_proj.weight @ s + module.key_proj.weight @ h)
        return float(module.energy.weight[0] @ hidden)
    if score == "dot":  # Luong eq. 8: s^T h
        return float(sum(s[i] * h[i] for i in range(len(s))))
    if score == "general":  # Luong eq. 8: s^T W_a h
        return float(s @ module.key_proj.weight @ h)
    if score == "concat":  # Luong eq. 8: v_a^T tanh(W_a [s; h]), with the unsplit W_a
        hidden = torch.tanh(module.concat_weight() @ torch.cat([s, h]))
        return float(module.energy.weight[0] @ hidden)
    if score == "location":  # Luong 3.1: (W_a s)_j, no content term
        return float(module.location_proj.weight[j] @ s)
    if score == "scaled_dot":  # Vaswani eq. 1: s^T h / sqrt(d_k)
        return float(s @ h) / math.sqrt(len(h))
    raise AssertionError(score)


def reference_attention(module, score, query, keys, values, lengths):
    """Loop version of softmax-over-real-positions and the weighted sum of values."""
    B, T, _ = query.shape
    S, Dv = values.shape[1:]
    weights = torch.zeros(B, T, S, dtype=torch.float64)
    context = torch.zeros(B, T, Dv, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            energies = [
                reference_energy(module, score, query[b, t], keys[b, j], j)
                for j in range(lengths[b])
            ]
            top = max(energies)
            exps = [math.exp(e - top) for e in energies]
            for j, e in enumerate(exps):
                weights[b, t, j] = e / sum(exps)
                context[b, t] += weights[b, t, j] * values[b, j]
    return context, weights


def test_golden_scaled_dot_product_example() -> None:
    """A worked example by hand: one query, three keys, two-dimensional values."""
    module = build_attention("scaled_dot", 3, 3, attn_dim=1)
    query = torch.tensor([[[1.0, 0.0, 1.0]]])  # (B=1, T=1, 3)
    keys = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]])  # (1, S=3, 3)
    values = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])  # (1, 3, 2)
    context, weights = module(query, keys, values)
    # energies 1/sqrt3, 1/sqrt3, 2/sqrt3
    torch.testing.assert_close(
        weights, torch.tensor([[[0.2645, 0.2645, 0.4711]]]), atol=1e-3, rtol=0
    )
    torch.testing.assert_close(context, torch.tensor([[[3.413, 4.413]]]), atol=1e-3, rtol=0)
    assert context[0, 0, 0].item() == pytest.approx(3.41, abs=5e-3)


@pytest.mark.parametrize("score", SCORES)
def test_score_matches_loop_formula(score: str) -> None:
    module = make(score)
    query, keys, values = inputs(score, S=5)
    lengths = [5, 3]
    mask = padding_mask(torch.tensor(lengths), 5)  # (B, S)
    context, weights = module(query, keys, values, mask=mask)
    expected_context, expected_weights = reference_attention(
        module, score, query, keys, values, lengths
    )
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(context, expected_context, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("score", SCORES)
def test_raw_scores_match_loop_formula(score: str) -> None:
    """`scores` itself (before the softmax) is the formula, pair by pair."""
    module = make(score)
    query, keys, _ = inputs(score)
    energies = module.scores(query, module.prepare_keys(keys))  # (B, T, S)
    assert energies.shape == (2, 3, 4)
    for b in range(2):
        for t in range(3):
            for j in range(4):
                expected = reference_energy(module, score, query[b, t], keys[b, j], j)
                assert energies[b, t, j].item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("score", SCORES)
def test_gradcheck_global(score: str) -> None:
    module = make(score)
    query, keys, values = inputs(score, B=2, T=2, S=3)
    mask = padding_mask(torch.tensor([3, 2]), 3)
    gradcheck_module(module, query, keys, values, mask=mask)


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("score", SCORES)
def test_pure_and_prepared_keys(score: str, window: str) -> None:
    """Same inputs give the same outputs twice; explicit prepared_keys change nothing; the
    module gains no attributes (nothing cached) from a call."""
    module = make(score, window)
    query, keys, values = inputs(score, T=3, S=6)
    mask = padding_mask(torch.tensor([6, 4]), 6)
    attributes = set(vars(module)) | {name for name, _ in module.named_buffers()}
    first = module(query, keys, values, mask=mask)
    second = module(query, keys, values, mask=mask)
    explicit = module(query, keys, values, mask=mask, prepared_keys=module.prepare_keys(keys))
    for a, b, c in zip(first, second, explicit, strict=False):
        assert torch.equal(a, b)
        assert torch.equal(a, c)
    assert set(vars(module)) | {name for name, _ in module.named_buffers()} == attributes
    # a different batch right after is not influenced by the first one
    other = inputs(score, T=3, S=6, seed=7)
    fresh = make(score, window)
    torch.testing.assert_close(module(*other)[1], fresh(*other)[1], rtol=0, atol=0)


@pytest.mark.parametrize("score", SCORES)
def test_registry_builds_each_score(score: str) -> None:
    query_dim, key_dim = dims(score)
    module = build_attention(score, query_dim, key_dim, attn_dim=6)
    assert type(module) is CLASSES[score]
    local = build_attention(score, query_dim, key_dim, attn_dim=6, window="local_p", D=3)
    assert isinstance(local, LocalAttention)
    assert type(local.content) is CLASSES[score]
    assert local.D == 3 and local.window == "local_p"


def test_registry_names_and_errors() -> None:
    assert SCORES == ("additive", "dot", "general", "concat", "location", "scaled_dot")
    assert WINDOWS == ("global", "local_m", "local_p")
    with pytest.raises(ValueError, match="additive, dot, general, concat, location, scaled_dot"):
        build_attention("bilinear", 4, 4, attn_dim=4)
    with pytest.raises(ValueError, match="global, local_m, local_p"):
        build_attention("dot", 4, 4, attn_dim=4, window="local")
    for score in SAME_DIM_SCORES:
        with pytest.raises(ValueError, match=f"'{score}' score needs query_dim == key_dim"):
            build_attention(score, 4, 6, attn_dim=4)
    with pytest.raises(ValueError, match="D must be >= 1"):
        build_attention("dot", 4, 4, attn_dim=4, window="local_m", D=0)
    # the projecting scores accept different sizes
    for score in ("additive", "general", "concat", "location"):
        build_attention(score, 4, 6, attn_dim=4)


def test_location_truncates_and_rejects_long_sources() -> None:
    module = make("location")  # max_src_len=9
    query, keys, values = inputs("location", S=4)
    energies = module.scores(query, keys)  # (B, T, 4)
    torch.testing.assert_close(energies, module.location_proj(query)[..., :4])
    # the keys' content plays no part: other keys of the same length give the same weights
    _, weights = module(query, keys, values)
    _, weights_other = module(query, torch.randn_like(keys), values)
    torch.testing.assert_close(weights, weights_other, rtol=0, atol=0)
    long_keys = torch.zeros(2, 10, keys.size(-1), dtype=torch.float64)
    with pytest.raises(ValueError, match="max_src_len=9"):
        module(query, long_keys, torch.zeros(2, 10, 2, dtype=torch.float64))


def test_concat_split_equals_concatenated_matrix() -> None:
    """W_q s + W_k h == W_a [s; h]: the split of W_a is the same function."""
    module = make("concat")
    query, keys, _ = inputs("concat")
    split = torch.tanh(
        module.query_proj(query).unsqueeze(2) + module.prepare_keys(keys).unsqueeze(1)
    )  # (B, T, S, A)
    pairs = torch.cat(
        [query.unsqueeze(2).expand(-1, -1, 4, -1), keys.unsqueeze(1).expand(-1, 3, -1, -1)], dim=-1
    )  # (B, T, S, Dq + Dk)
    joint = torch.tanh(pairs @ module.concat_weight().T)  # (B, T, S, A)
    torch.testing.assert_close(split, joint, atol=1e-12, rtol=0)


def test_choice_lists_are_the_config_enums() -> None:
    from attnseq.config.choices import Score, Window

    assert tuple(score.value for score in Score if score is not Score.none) == SCORES
    assert tuple(window.value for window in Window) == WINDOWS
