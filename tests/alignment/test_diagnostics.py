"""Attention diagnostics (attnseq/alignment/diagnostics.py): end-of-source mass and per-head
entropy on hand-made attention, over padded batches and several batches; the entropy of each
example from hand-made attention; the per-batch statistics. The evaluator's diagnostics of real
models: tests/evaluation/test_evaluator.py."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from attnseq.alignment.diagnostics import (
    AttentionDiagnostics,
    attention_statistics,
    example_entropies,
    is_per_layer_key,
)


def test_rnn_maps_one_hot_on_the_last_source_and_uniform() -> None:
    """Example 0: 3 source, 2 target rows, every row one-hot on position 2 (the last);
    example 1: 2 source, 1 target row, uniform; padding rows and columns carry junk that
    must not count."""
    weights = torch.full((2, 2, 4), 0.25)  # (B, T, S)
    weights[0] = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    weights[1, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0])
    diagnostics = AttentionDiagnostics()
    diagnostics.add(weights, torch.tensor([3, 2]), torch.tensor([2, 1]))
    results = diagnostics.results()
    assert set(results) == {"attention/last_source_mass", "attention/entropy"}
    # three real rows: mass 1, 1, 0.5; entropy 0, 0, ln 2
    assert results["attention/last_source_mass"] == pytest.approx(2.5 / 3)
    assert results["attention/entropy"] == pytest.approx(math.log(2) / 3)


def test_transformer_heads_and_batches_are_weighted_by_rows() -> None:
    """Two batches of (B, L=2, H=2, T, S); head (1, 1) one-hot on the last source position,
    the others uniform over the real source: per-head entropy 0 or ln S_b averaged by rows."""

    def batch(src_len: int, tgt_len: int) -> torch.Tensor:
        weights = torch.zeros(1, 2, 2, tgt_len, 5)  # (B, L, H, T, S)
        weights[..., :src_len] = 1.0 / src_len
        weights[0, 0, 0] = 0.0
        weights[0, 0, 0, :, src_len - 1] = 1.0
        return weights

    diagnostics = AttentionDiagnostics()
    diagnostics.add(batch(4, 3), torch.tensor([4]), torch.tensor([3]))  # 3 rows, S = 4
    diagnostics.add(batch(2, 1), torch.tensor([2]), torch.tensor([1]))  # 1 row, S = 2
    results = diagnostics.results()
    uniform_entropy = (3 * math.log(4) + math.log(2)) / 4
    uniform_mass = (3 / 4 + 1 / 2) / 4
    assert results["attention/layer1/head1/entropy"] == pytest.approx(0.0, abs=1e-12)
    for name in ("layer1/head2", "layer2/head1", "layer2/head2"):
        assert results[f"attention/{name}/entropy"] == pytest.approx(uniform_entropy)
    assert results["attention/layer1/last_source_mass"] == pytest.approx((1 + uniform_mass) / 2)
    assert results["attention/layer2/last_source_mass"] == pytest.approx(uniform_mass)
    assert results["attention/last_source_mass"] == pytest.approx((1 + 3 * uniform_mass) / 4)
    assert results["attention/entropy"] == pytest.approx(3 * uniform_entropy / 4)
    assert AttentionDiagnostics().results() == {}


def test_per_layer_keys_are_told_from_the_overall_ones() -> None:
    assert is_per_layer_key("test/attention/layer2/last_source_mass")
    assert is_per_layer_key("valid/attention/layer1/head3/entropy")
    assert not is_per_layer_key("test/attention/entropy")
    assert not is_per_layer_key("test/align/aer/layer2/mean") and not is_per_layer_key("best_step")


class UniformOverSource(torch.nn.Module):
    """A stand-in model whose cross-attention rows are uniform over each example's real source
    (entropy ln S_b), with junk in the padding rows; `heads`: (B, 1, 2, T, S) with a second
    head one-hot on the first source position (entropy 0)."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, heads: bool = False) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, src, src_lengths, tgt_in, need_weights=False):
        B, S = src.shape
        T = tgt_in.size(1)
        real = torch.arange(S) < src_lengths[:, None]  # (B, S)
        rows = (real / src_lengths[:, None]).unsqueeze(1).expand(B, T, S).clone()  # (B, T, S)
        if self.heads:
            one_hot = torch.zeros_like(rows)
            one_hot[..., 0] = 1.0
            rows = torch.stack([rows, one_hot], dim=1).unsqueeze(1)  # (B, 1, 2, T, S)
        return SimpleNamespace(attention=rows)


@pytest.mark.parametrize("heads", [False, True])
def test_example_entropies_of_known_attention(heads: bool) -> None:
    """Sources of 4 and 2 pieces, targets of 2 and 1 (3 and 2 rows with </s>), batched
    together so that the second is padded; an example with an empty target is not scored."""
    examples = [([5, 6, 7, 8], [5, 6]), ([5, 6], [7]), ([5], [])]
    sums = example_entropies(UniformOverSource(heads), examples, batch_size=8)
    share = 0.5 if heads else 1.0  # the one-hot head adds 0 to the head mean
    expected = [[3 * math.log(4) * share, 3], [2 * math.log(2) * share, 2], [0, 0]]
    assert sums == pytest.approx(np.array(expected))


# --------------------------------------------------------------- statistics for TensorBoard
def test_attention_statistics_one_hot_and_uniform_rows() -> None:
    one_hot = torch.tensor([[[0.0, 1.0, 0.0, 0.0]]])  # (B=1, T=1, S=4)
    assert attention_statistics(one_hot) == {"entropy": 0.0, "argmax_weight": 1.0}
    uniform = torch.full((1, 1, 4), 0.25)
    stats = attention_statistics(uniform)
    assert stats["entropy"] == pytest.approx(math.log(4))
    assert stats["argmax_weight"] == pytest.approx(0.25)
    # a row over 3 real columns (the 4th is padding), and a padded target row left out
    weights = torch.tensor([[[1 / 3, 1 / 3, 1 / 3, 0.0], [0.1, 0.2, 0.3, 0.4]]])  # (1, 2, 4)
    src_mask = torch.tensor([[True, True, True, False]])
    tgt_mask = torch.tensor([[True, False]])
    mask = tgt_mask[:, :, None] & src_mask[:, None, :]  # (1, 2, 4)
    stats = attention_statistics(weights, mask)
    assert stats["entropy"] == pytest.approx(math.log(3))
    assert stats["argmax_weight"] == pytest.approx(1 / 3)
    # a (B, T, S) mask serves (B, L, H, T, S) weights; the mean runs over layers and heads
    five_d = torch.stack([weights, torch.cat([one_hot, one_hot], dim=1)], dim=1)[:, :, None]
    stats = attention_statistics(five_d, mask)  # rows: uniform over 3, one-hot
    assert stats["entropy"] == pytest.approx(math.log(3) / 2)
    assert stats["argmax_weight"] == pytest.approx((1 / 3 + 1) / 2)
    assert attention_statistics(weights, torch.zeros_like(mask))["entropy"] == 0.0
