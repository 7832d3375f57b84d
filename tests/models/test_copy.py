"""The pointer-generator's final distribution and the coverage loss (See et al. 2017, eqs. 9-12),
checked against hand numbers and direct computation; the coverage-aware additive score."""

import math

import pytest
import torch

from attnseq.attention.additive import AdditiveAttention, CoverageAttention
from attnseq.attention.luong import ConcatAttention, GeneralAttention
from attnseq.models.loss_terms import coverage_term
from attnseq.models.pointer_generator import (
    GenerationProbability,
    coverage_loss,
    extended_log_probs,
    teacher_forced_coverage,
)


def test_final_distribution_on_hand_numbers() -> None:
    # V = 5, source "7 2 5 2" in the extended vocabulary (5 = the first OOV), n_oov = 2
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5, -1.0]])  # (B=1, V)
    attention = torch.tensor([[0.1, 0.2, 0.3, 0.4]])  # (1, S)
    src_ext = torch.tensor([[6, 2, 5, 2]])
    z = torch.tensor([0.4])  # p_gen = sigmoid(0.4)
    p_gen = 1 / (1 + math.exp(-0.4))
    vocab = torch.softmax(logits, dim=-1)[0].tolist()
    expected = [p_gen * p for p in vocab] + [0.0, 0.0]
    expected[2] += (1 - p_gen) * (0.2 + 0.4)  # id 2 is at positions 1 and 3
    expected[5] += (1 - p_gen) * 0.3
    expected[6] += (1 - p_gen) * 0.1
    probs = extended_log_probs(logits, attention, src_ext, 2, z).exp()[0]
    torch.testing.assert_close(probs, torch.tensor(expected), atol=1e-6, rtol=1e-5)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("z", [-60.0, -3.0, 0.0, 3.0, 60.0])
def test_final_distribution_sums_to_one_and_stays_finite(z: float) -> None:
    generator = torch.Generator().manual_seed(0)
    batch, steps, src_len, vocab, n_oov = 3, 4, 6, 11, 3
    logits = torch.randn(batch, steps, vocab, generator=generator) * 5
    attention = torch.softmax(torch.randn(batch, steps, src_len, generator=generator), dim=-1)
    attention[1, :, 4:] = 0.0  # padding of row 1
    attention[1] /= attention[1].sum(-1, keepdim=True)
    src_ext = torch.randint(4, vocab + n_oov, (batch, src_len), generator=generator)
    log_probs = extended_log_probs(logits, attention, src_ext, n_oov, torch.full((batch, steps), z))
    assert log_probs.shape == (batch, steps, vocab + n_oov)
    sums = log_probs.exp().sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    # every source word keeps a finite log-probability, even when p_gen or 1 - p_gen underflow
    present = log_probs.gather(-1, src_ext.unsqueeze(1).expand(-1, steps, -1))
    assert torch.isfinite(present).all()
    # an extended id is produced by copying alone: log P = log(1 - p_gen) + log(its attention)
    b, t = 0, 1
    for k in range(n_oov):
        mass = float(attention[b, t][src_ext[b] == vocab + k].sum())
        if mass > 0:
            expected = -math.log1p(math.exp(z)) + math.log(mass)  # logsigmoid(-z) + log mass
            assert log_probs[b, t, vocab + k].item() == pytest.approx(expected, abs=1e-4)


def test_gradient_is_finite_where_probabilities_vanish() -> None:
    logits = torch.tensor([[[0.0, 50.0, -50.0, 0.0]]], requires_grad=True)  # (1, 1, V=4)
    attention = torch.tensor([[[1.0, 0.0]]])
    src_ext = torch.tensor([[4, 1]])  # position 0: OOV id 4; position 1 (weight 0): id 1
    z = torch.tensor([[-80.0]], requires_grad=True)  # p_gen ~ 1e-35
    log_probs = extended_log_probs(logits, attention, src_ext, 2, z)
    # id 5 belongs to no source word: probability 0, clamped to the smallest normal float
    assert log_probs[0, 0, 5].item() == pytest.approx(math.log(torch.finfo(torch.float32).tiny))
    (-log_probs[0, 0, 4] - log_probs[0, 0, 2] - log_probs[0, 0, 5]).backward()
    assert torch.isfinite(logits.grad).all() and torch.isfinite(z.grad).all()


def test_generation_probability_is_one_linear_map_of_c_s_x() -> None:
    torch.manual_seed(0)
    module = GenerationProbability(3, 2, 4)
    c, s, x = torch.randn(5, 3), torch.randn(5, 2), torch.randn(5, 4)
    weight, bias = module.linear.weight[0], module.linear.bias[0]
    w_c, w_s, w_x = weight[:3], weight[3:5], weight[5:]
    expected = c @ w_c + s @ w_s + x @ w_x + bias  # w_c^T c + w_s^T s + w_x^T x + b (eq. 8)
    torch.testing.assert_close(module(c, s, x), expected)


def test_coverage_loss_worked_example() -> None:
    # three steps over three source words
    attention = torch.tensor([[[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]])  # (1, 3, 3)
    coverage = teacher_forced_coverage(attention)
    # c^0 = 0, c^1 = a^0, c^2 = a^0 + a^1
    expected_coverage = torch.tensor([[[0.0, 0.0, 0.0], [0.5, 0.3, 0.2], [1.1, 0.6, 0.3]]])
    torch.testing.assert_close(coverage, expected_coverage)
    # step 0: 0; step 1: min(.6,.5)+min(.3,.3)+min(.1,.2) = .9; step 2: .1+.2+.3 = .6
    losses = coverage_loss(attention, coverage)
    torch.testing.assert_close(losses, torch.tensor([[0.0, 0.9, 0.6]]))
    # lambda * sum over real target positions: position 2 is padding here
    targets = torch.tensor([[7, 8, 0]])
    assert coverage_term(losses, targets, 0, 2.0).item() == pytest.approx(2.0 * 0.9)


@pytest.mark.parametrize("score", [AdditiveAttention, ConcatAttention])
def test_coverage_attention_adds_w_c_c_inside_the_tanh(score) -> None:
    torch.manual_seed(0)
    content = score(5, 6, 7)
    attention = CoverageAttention(content)
    query, keys = torch.randn(2, 3, 5), torch.randn(2, 4, 6)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    # no coverage: exactly the content score's attention
    plain_context, plain_weights = content(query, keys, keys, mask)
    context, weights = attention(query, keys, keys, mask)
    torch.testing.assert_close(weights, plain_weights)
    torch.testing.assert_close(context, plain_context)
    # with coverage: e = v^T tanh(W_q s + W_k h + w_c c), computed directly
    coverage = torch.rand(2, 3, 4)
    w_c = attention.coverage_proj.weight[:, 0]  # (A,)
    hidden = (
        content.query_proj(query).unsqueeze(2)
        + content.key_proj(keys).unsqueeze(1)
        + coverage.unsqueeze(-1) * w_c
    )
    energies = content.energy(torch.tanh(hidden)).squeeze(-1)
    energies = energies.masked_fill(~mask.unsqueeze(1), float("-inf"))
    _, weights = attention(query, keys, keys, mask, coverage=coverage)
    torch.testing.assert_close(weights, torch.softmax(energies, dim=-1))
    assert torch.all(weights[1, :, 3] == 0)


def test_coverage_attention_needs_a_tanh_score() -> None:
    with pytest.raises(TypeError, match="additive or concat"):
        CoverageAttention(GeneralAttention(4, 4))  # type: ignore[arg-type]
