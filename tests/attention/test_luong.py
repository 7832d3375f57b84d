"""Luong's local attention (sec. 3.2, eqs. 9-10): windows, edges, a worked local-p example,
gradchecks."""

import math

import pytest
import torch
from helpers import gradcheck_module

from attnseq.attention import SCORES, LocalAttention, build_attention, padding_mask

DIM = 4  # query_dim == key_dim so every score can be wrapped


def make(score: str, window: str, D: int = 2, seed: int = 0) -> LocalAttention:
    torch.manual_seed(seed)
    module = build_attention(score, DIM, DIM, attn_dim=5, window=window, D=D, max_src_len=16)
    assert isinstance(module, LocalAttention)
    return module.double()


def inputs(B: int = 2, T: int = 8, S: int = 8, Dv: int = 3, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(B, T, DIM, generator=generator, dtype=torch.float64)
    keys = torch.randn(B, S, DIM, generator=generator, dtype=torch.float64)
    values = torch.randn(B, S, Dv, generator=generator, dtype=torch.float64)
    return query, keys, values


# --- local-m: p_t = t ------------------------------------------------------------------------


@pytest.mark.parametrize("score", SCORES)
def test_local_m_weights_outside_window_are_exactly_zero(score: str) -> None:
    module = make(score, "local_m", D=2)
    query, keys, values = inputs(T=8, S=8)
    _, weights = module(query, keys, values)  # query_positions None: t = 0..7
    for t in range(8):
        for s in range(8):
            if abs(s - t) > 2:
                assert torch.all(weights[:, t, s] == 0.0)
            else:
                assert torch.all(weights[:, t, s] > 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 8, dtype=torch.float64))
    # edges: the window is clipped to the sequence, and what is left still sums to one
    nonzero = (weights[0] > 0).sum(-1).tolist()
    assert nonzero == [3, 4, 5, 5, 5, 5, 4, 3]


def test_local_m_window_is_a_softmax_over_the_window() -> None:
    """Inside the window, local-m equals the content softmax restricted to [t-D, t+D]."""
    module = make("general", "local_m", D=1)
    query, keys, values = inputs(B=1, T=4, S=6)
    _, weights = module(query, keys, values)
    energies = module.scores(query, module.prepare_keys(keys))[0]  # (T, S)
    for t in range(4):
        window = [s for s in range(6) if abs(s - t) <= 1]
        exps = {s: math.exp(energies[t, s].item()) for s in window}
        for s in range(6):
            expected = exps[s] / sum(exps.values()) if s in window else 0.0
            assert weights[0, t, s].item() == pytest.approx(expected, abs=1e-12)


def test_local_m_default_positions_and_explicit_positions_agree() -> None:
    module = make("dot", "local_m")
    query, keys, values = inputs(T=5, S=8)
    default = module(query, keys, values)
    explicit_t = module(query, keys, values, query_positions=torch.arange(5))  # (T,)
    explicit_bt = module(query, keys, values, query_positions=torch.arange(5).expand(2, 5))
    for a, b, c in zip(default, explicit_t, explicit_bt, strict=False):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_local_m_per_example_positions() -> None:
    """(B, T) positions: each row uses its own; same as running the rows one by one."""
    module = make("concat", "local_m")
    query, keys, values = inputs(T=3, S=8)
    positions = torch.tensor([[0, 3, 7], [6, 2, 1]])  # (B, T)
    context, weights = module(query, keys, values, query_positions=positions)
    for b in range(2):
        row_context, row_weights = module(
            query[b : b + 1], keys[b : b + 1], values[b : b + 1], query_positions=positions[b]
        )
        # float64 rounding of a batched vs a single-row matmul may differ in the last bit
        torch.testing.assert_close(weights[b : b + 1], row_weights, rtol=0, atol=1e-12)
        torch.testing.assert_close(context[b : b + 1], row_context, rtol=0, atol=1e-12)
        for t in range(3):
            support = weights[b, t].nonzero().flatten().tolist()
            p = int(positions[b, t])
            assert support == [s for s in range(8) if abs(s - p) <= 2]


def test_local_m_one_step_at_a_time_equals_whole_sequence() -> None:
    """Incremental decoding: T=1 queries with query_positions=[t] give row t of the full pass."""
    module = make("additive", "local_m")
    query, keys, values = inputs(T=6, S=8)
    mask = padding_mask(torch.tensor([8, 5]), 8)
    prepared = module.prepare_keys(keys)
    context, weights = module(query, keys, values, mask=mask, prepared_keys=prepared)
    for t in range(6):
        step_context, step_weights = module(
            query[:, t : t + 1],
            keys,
            values,
            mask=mask,
            prepared_keys=prepared,
            query_positions=torch.tensor([t]),
        )
        torch.testing.assert_close(step_weights, weights[:, t : t + 1], rtol=0, atol=1e-15)
        torch.testing.assert_close(step_context, context[:, t : t + 1], rtol=0, atol=1e-15)


def test_local_m_window_past_the_source_gives_zeros_not_nan() -> None:
    module = make("general", "local_m", D=2)
    query, keys, values = inputs(T=3, S=5)
    query.requires_grad_(True)
    keys.requires_grad_(True)
    mask = padding_mask(torch.tensor([5, 3]), 5)
    # t = 6: window [4, 8] holds only s=4 in row 0 and nothing allowed in row 1 (length 3);
    # t = 7, 20: nothing at all
    positions = torch.tensor([6, 7, 20])
    context, weights = module(query, keys, values, mask=mask, query_positions=positions)
    assert weights[0, 0].tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert torch.all(weights[1] == 0.0) and torch.all(weights[:, 1:] == 0.0)
    assert torch.all(context[1] == 0.0) and torch.all(context[:, 1:] == 0.0)
    assert not torch.isnan(context).any()
    context.sum().backward()
    for tensor in (query.grad, keys.grad, *(p.grad for p in module.parameters())):
        assert tensor is not None and torch.isfinite(tensor).all()


def test_local_m_wide_window_equals_global() -> None:
    """With D >= S the window holds every position: local-m is the global score."""
    module = make("general", "local_m", D=8)
    query, keys, values = inputs(T=5, S=8)
    mask = padding_mask(torch.tensor([8, 6]), 8)
    local = module(query, keys, values, mask=mask)
    global_ = module.content(query, keys, values, mask=mask)
    for a, b in zip(local, global_, strict=False):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-15)


def test_local_m_respects_padding_inside_window() -> None:
    module = make("dot", "local_m", D=2)
    query, keys, values = inputs(T=6, S=6)
    mask = padding_mask(torch.tensor([6, 3]), 6)
    _, weights = module(query, keys, values, mask=mask)
    assert torch.all(weights[1, :, 3:] == 0.0)
    sums = weights[1].sum(-1)  # t = 0..4 see a real token, t = 5 sees only padding
    torch.testing.assert_close(sums, torch.tensor([1.0, 1, 1, 1, 1, 0], dtype=torch.float64))


def test_local_m_rejects_bad_positions_shape() -> None:
    module = make("dot", "local_m")
    query, keys, values = inputs(T=3, S=5)
    with pytest.raises(ValueError, match="query_positions"):
        module(query, keys, values, query_positions=torch.arange(4))


# --- local-p: p_t = S_x sigmoid(v_p^T tanh(W_p h_t)), Gaussian --------------------------------


def worked_example_module(D: int = 2) -> LocalAttention:
    """Dot content, W_p = [[1, 0]] (A=1), v_p = [[4]]: p_t = S_x sigmoid(4 tanh(query[0]))."""
    module = build_attention("dot", 2, 2, attn_dim=1, window="local_p", D=D).double()
    assert isinstance(module, LocalAttention)
    with torch.no_grad():
        module.position_proj.weight.copy_(torch.tensor([[1.0, 0.0]]))
        module.position_energy.weight.copy_(torch.tensor([[4.0]]))
    return module


def query_for(fraction: float, y: float) -> list[float]:
    """A query whose sigmoid(4 tanh(x)) is `fraction`; its second component y scales the
    content energies (keys are [0, k_s], so x does not enter them)."""
    logit = math.log(fraction / (1.0 - fraction))
    return [math.atanh(logit / 4.0), y]


def test_local_p_worked_example() -> None:
    """S_x = 10 (S = 12 with two padded positions), D = 2, so sigma = 1; four queries with
    sigmoid = 0.5, 0.43, 0.05, 0.95, i.e. p_t = 5, 4.3, 0.5, 9.5."""
    module = worked_example_module(D=2)
    ys = [1.0, -0.5, 2.0, 0.7]
    query = torch.tensor(
        [
            [
                query_for(0.5, ys[0]),
                query_for(0.43, ys[1]),
                query_for(0.05, ys[2]),
                query_for(0.95, ys[3]),
            ]
        ],
        dtype=torch.float64,
    )  # (B=1, T=4, 2)
    k = [s / 4.0 for s in range(12)]
    keys = torch.tensor([[[0.0, k_s] for k_s in k]], dtype=torch.float64)  # (1, S=12, 2)
    values = torch.arange(24, dtype=torch.float64).reshape(1, 12, 2)  # (1, 12, 2)
    mask = padding_mask(torch.tensor([10]), 12)  # S_x = 10

    centres = module.window_centres(query, 12, mask.unsqueeze(1))  # (1, T, 1)
    torch.testing.assert_close(
        centres.flatten(), torch.tensor([5.0, 4.3, 0.5, 9.5], dtype=torch.float64)
    )

    # By hand: the window is every integer s with |s - p_t| <= 2, minus the padding (10, 11).
    p = [5.0, 4.3, 0.5, 9.5]
    windows = [
        [3, 4, 5, 6, 7],  # p = 5:   [3, 7], 2D + 1 = 5 positions
        [3, 4, 5, 6],  # p = 4.3: [2.3, 6.3], 2D = 4 positions
        [0, 1, 2],  # p = 0.5: [-1.5, 2.5], clipped at the start
        [8, 9],
    ]  # p = 9.5: [7.5, 11.5], 10 and 11 are padding
    sigma = 1.0  # D / 2
    expected = torch.zeros(1, 4, 12, dtype=torch.float64)
    for t in range(4):
        exps = {s: math.exp(ys[t] * k[s]) for s in windows[t]}  # dot score y * k_s
        for s in windows[t]:
            align = exps[s] / sum(exps.values())
            expected[0, t, s] = align * math.exp(-((s - p[t]) ** 2) / (2 * sigma**2))

    context, weights = module(query, keys, values, mask=mask)
    torch.testing.assert_close(weights, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(context, expected @ values, rtol=0, atol=1e-12)
    # eq. 10 is not renormalised: every row sums to less than one
    assert torch.all(weights.sum(-1) < 1.0)
    # the Gaussian factor alone at p_t = 5: 1 at s = 5, e^-1/2 at 4 and 6, e^-2 at 3 and 7
    in_window = [math.exp(ys[0] * k[s]) for s in range(3, 8)]
    align = torch.tensor(in_window, dtype=torch.float64) / sum(in_window)
    gaussian = torch.tensor(
        [math.exp(-2), math.exp(-0.5), 1.0, math.exp(-0.5), math.exp(-2)], dtype=torch.float64
    )
    torch.testing.assert_close(weights[0, 0, 3:8] / align, gaussian, rtol=0, atol=1e-12)


def test_local_p_source_length_comes_from_each_rows_mask() -> None:
    """The same query centres at S_x / 2 for S_x = 10 and S_x = 6; with no mask S_x = S."""
    module = worked_example_module(D=1)
    query = torch.tensor([[query_for(0.5, 1.0)]] * 2, dtype=torch.float64)  # (B=2, T=1, 2)
    keys = torch.randn(2, 12, 2, dtype=torch.float64)
    values = torch.randn(2, 12, 3, dtype=torch.float64)
    mask = padding_mask(torch.tensor([10, 6]), 12)
    _, weights = module(query, keys, values, mask=mask)
    assert weights[0, 0].nonzero().flatten().tolist() == [4, 5, 6]  # p = 5
    assert weights[1, 0].nonzero().flatten().tolist() == [2, 3, 4]  # p = 3
    _, unmasked = module(query, keys, values)
    assert unmasked[0, 0].nonzero().flatten().tolist() == [5, 6, 7]  # p = 12 / 2 = 6
    # a (B, T, S) mask gives the same S_x as the (B, S) one
    _, weights_3d = module(query, keys, values, mask=mask.unsqueeze(1).expand(2, 1, 12))
    torch.testing.assert_close(weights_3d, weights, rtol=0, atol=0)


@pytest.mark.parametrize("score", SCORES)
def test_local_p_window_and_gaussian_bound(score: str) -> None:
    """For any content score: zero outside [p_t - D, p_t + D]; each weight is the in-window
    softmax times a Gaussian <= 1, so rows sum to at most one."""
    module = make(score, "local_p", D=2)
    query, keys, values = inputs(T=5, S=8)
    mask = padding_mask(torch.tensor([8, 5]), 8)
    _, weights = module(query, keys, values, mask=mask)
    centres = module.window_centres(query, 8, mask)  # (B, T, 1)
    assert centres.shape == (2, 5, 1)
    distance = torch.arange(8, dtype=torch.float64) - centres  # (B, T, S)
    assert torch.all(weights[distance.abs() > 2] == 0.0)
    assert torch.all(weights[:, :, 5:][~mask[:, None, 5:].expand(-1, 5, -1)] == 0.0)
    sums = weights.sum(-1)
    assert torch.all(sums > 0.0) and torch.all(sums < 1.0)


# --- gradients -------------------------------------------------------------------------------


@pytest.mark.parametrize("window", ["local_m", "local_p"])
@pytest.mark.parametrize("score", SCORES)
def test_gradcheck_local(score: str, window: str) -> None:
    module = make(score, window, D=1)
    query, keys, values = inputs(B=2, T=3, S=5, Dv=2)
    mask = padding_mask(torch.tensor([5, 3]), 5)
    gradcheck_module(module, query, keys, values, mask=mask)


def test_local_p_gradient_reaches_position_predictor() -> None:
    """W_p and v_p learn through the Gaussian (the window edges have no gradient)."""
    module = make("general", "local_p", D=2)
    query, keys, values = inputs(T=4, S=8)
    context, _ = module(query, keys, values)
    context.square().sum().backward()
    assert module.position_proj.weight.grad.abs().sum() > 0
    assert module.position_energy.weight.grad.abs().sum() > 0
