"""Every efficient self-attention kind through `build_self_attention`
(attnseq/attention/efficient.py): padding and empty rows, decoding steps against the causal
forward, fast and explicit paths, refusals, and the config's kinds."""

import pytest
import torch
from mechanism_inputs import ATOL, D_K, D_MODEL, HEADS, OPTIONS, lengths_mask, make

from attnseq.attention.efficient import build_mechanism, build_self_attention
from attnseq.attention.full import FullAttention
from attnseq.attention.masks import padding_mask
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.attention.strided import StridedSelfAttention
from attnseq.config.choices import AttentionKind
from attnseq.config.schema import AttentionConfig

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.mark.parametrize("name", list(OPTIONS))
def test_padding_does_not_change_real_rows_and_empty_rows_are_zero(name: str) -> None:
    module = make(name)
    x = torch.randn(3, 40, D_MODEL)
    mask = padding_mask(torch.tensor([40, 25, 0]), 40)  # the last row has no real token
    batched, _ = module(x, x, x, mask)
    assert torch.isfinite(batched).all()
    alone, _ = module(x[1:2, :25], x[1:2, :25], x[1:2, :25], mask[1:2, :25])
    torch.testing.assert_close(batched[1:2, :25], alone, atol=ATOL, rtol=0)
    # no real key: a zero context, so the output is the bias of W^O
    torch.testing.assert_close(batched[2], module.out_proj.bias.expand(40, -1))
    batched.sum().backward()  # gradients stay finite too
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


@pytest.mark.parametrize("name", ["local", "strided", "fixed", "linear", "performer", "bigbird"])
def test_decoding_steps_equal_the_causal_forward(name: str) -> None:
    """One step at a time, then steps of 3 positions, against the whole causal pass."""
    module = make(name)
    x = torch.randn(2, 70, D_MODEL)  # longer than the causal block of linear/performer
    expected, _ = module(x, x, x, is_causal=True)
    for chunk in (1, 3):
        cache = module.empty_cache(2, x)
        outputs = []
        for start in range(0, 70, chunk):
            out, weights, cache = module.attend_cached(x[:, start : start + chunk], cache)
            assert weights is None
            outputs.append(out)
        torch.testing.assert_close(torch.cat(outputs, dim=1), expected, atol=ATOL, rtol=0)
    if name == "local":  # only the last w keys are kept
        assert cache["self_k"].shape == (2, HEADS, 3, D_K)
    if name in ("linear", "performer"):  # constant-size running sums
        assert set(cache) >= {"self_kv", "self_k_sum"}


@pytest.mark.parametrize(
    "name", ["local", "strided", "fixed", "longformer", "linformer", "bigbird"]
)
def test_fast_and_explicit_paths_agree(name: str) -> None:
    module = make(name)
    x = torch.randn(2, 40, D_MODEL)
    fast, none = module(x, x, x, lengths_mask())
    explicit, weights = module(x, x, x, lengths_mask(), need_weights=True)
    assert none is None and weights is not None and weights.shape == (2, HEADS, 40, 40)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["linformer", "longformer"])
def test_encoder_only_kinds_refuse_causal_use(name: str) -> None:
    with pytest.raises(ValueError, match="not causal"):
        build_self_attention(OPTIONS[name], D_MODEL, HEADS, causal=True)
    module = make(name)
    x = torch.randn(1, 5, D_MODEL)
    with pytest.raises(ValueError, match="cannot be causal"):
        module(x, x, x, is_causal=True)


@pytest.mark.parametrize("kind", list(AttentionKind))
def test_every_config_kind_builds_its_mechanism(kind: AttentionKind) -> None:
    """The config Enum (no torch) and the mechanisms agree on names and on causality."""
    mechanism = build_mechanism(AttentionConfig(kind=kind), D_K)
    assert mechanism.kind == kind.value
    assert mechanism.supports_causal == kind.causal


def test_kinds_registry() -> None:
    for options in (None, AttentionConfig(kind=AttentionKind.full)):
        full = build_self_attention(options, D_MODEL, HEADS)
        assert type(full) is MultiHeadAttention and isinstance(full.mechanism, FullAttention)
    with pytest.raises(ValueError, match="valid: full, local"):
        build_self_attention(AttentionConfig(kind="sparse"), D_MODEL, HEADS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stride"):
        StridedSelfAttention(0)
