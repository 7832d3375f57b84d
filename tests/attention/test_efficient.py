"""Efficient self-attention mechanisms: each against its defining formula, masks and
patterns with exact zeros, causal forms against quadratic ones, decoding steps against the
causal forward pass, padding, no NaN, and Performer's error shrinking with more features."""

import math

import pytest
import torch

from attnseq.attention.efficient import build_mechanism, build_self_attention
from attnseq.attention.full import FullAttention, explicit_attention
from attnseq.attention.linear import (
    LinearSelfAttention,
    causal_kernel_attention,
    elu_feature_map,
    empty_sums,
    kernel_attention,
)
from attnseq.attention.linformer import LinformerSelfAttention
from attnseq.attention.longformer import LongformerSelfAttention
from attnseq.attention.masks import padding_mask
from attnseq.attention.multihead import MultiHeadAttention
from attnseq.attention.performer import PerformerSelfAttention, orthogonal_gaussian
from attnseq.attention.sliding_window import SlidingWindowSelfAttention
from attnseq.attention.strided import StridedSelfAttention, sparse_pattern
from attnseq.config.choices import AttentionKind, SparsePattern
from attnseq.config.schema import AttentionConfig

D_MODEL, HEADS, D_K = 32, 4, 8
ATOL = 1e-5
MAX_LENGTH = 64  # linformer's n
OPTIONS = {  # small parameters so that every pattern is really sparse at length 40
    "local": AttentionConfig(kind=AttentionKind.local, D=3),
    "strided": AttentionConfig(kind=AttentionKind.strided, stride=4),
    "fixed": AttentionConfig(
        kind=AttentionKind.strided, stride=5, pattern=SparsePattern.fixed, summary=2
    ),
    "longformer": AttentionConfig(kind=AttentionKind.longformer, D=2, global_tokens=3),
    "linformer": AttentionConfig(kind=AttentionKind.linformer, proj_dim=6),
    "linear": AttentionConfig(kind=AttentionKind.linear),
    "performer": AttentionConfig(kind=AttentionKind.performer, features=32),
    "bigbird": AttentionConfig(
        kind=AttentionKind.bigbird, block_size=4, window_blocks=1, global_blocks=1, random_blocks=2
    ),
}


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def qkv(length: int = 40, batch: int = 2, seed: int = 0, scale: float = 1.0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(batch, HEADS, length, D_K, generator=generator) for _ in range(3)]


def lengths_mask(length: int = 40) -> torch.Tensor:
    return padding_mask(torch.tensor([length, length - 9]), length)  # (B, S)


def make(name: str, seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    module = build_self_attention(OPTIONS[name], D_MODEL, HEADS, max_length=MAX_LENGTH)
    assert not isinstance(module.mechanism, FullAttention)
    return module.eval()


def band(length: int, window: int, causal: bool) -> torch.Tensor:
    """|i - j| <= w (or 0 <= i - j <= w), written directly."""
    i = torch.arange(length)
    offset = i[:, None] - i[None, :]
    return (offset >= 0) & (offset <= window) if causal else offset.abs() <= window


# --- local (sliding window) ------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_local_with_a_window_over_the_whole_sequence_equals_full_attention(causal: bool) -> None:
    torch.manual_seed(0)
    full = MultiHeadAttention(D_MODEL, HEADS).eval()
    local = MultiHeadAttention(D_MODEL, HEADS, mechanism=SlidingWindowSelfAttention(40)).eval()
    local.load_state_dict(full.state_dict())
    x = torch.randn(2, 40, D_MODEL)
    mask = None if causal else lengths_mask()
    expected, expected_weights = full(x, x, x, mask, is_causal=causal, need_weights=True)
    for need_weights in (False, True):
        out, weights = local(x, x, x, mask, is_causal=causal, need_weights=need_weights)
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
        if need_weights:
            torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "window"), [(40, 3), (100, 40), (7, 1), (1, 2)])
def test_local_is_softmax_over_the_band(length: int, window: int, causal: bool) -> None:
    """Blocked computation (several blocks for 100/40) == masked softmax over |i-j| <= w."""
    q, k, v = qkv(length)
    mask = padding_mask(torch.tensor([length, max(1, length - 9)]), length)
    allowed = band(length, window, causal) & mask[:, None, None, :]
    expected, expected_weights = explicit_attention(q, k, v, allowed)
    context, weights = SlidingWindowSelfAttention(window)(
        q, k, v, mask, causal=causal, need_weights=True
    )
    torch.testing.assert_close(context, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    assert torch.all(weights[..., ~band(length, window, causal)] == 0)


# --- strided and longformer patterns ---------------------------------------------------------


def test_sparse_patterns_golden() -> None:
    """Child et al. 2019 section 4.2 with l = 3 at position 7 of 10."""
    positions = torch.arange(10)

    def row(pattern: str, causal: bool, summary: int = 1) -> list[int]:
        mask = sparse_pattern(positions[7:8], positions, 3, pattern, summary, causal)[0]
        return positions[mask].tolist()

    # strided: |7 - j| <= 3, or 7 - j a multiple of 3
    assert row("strided", causal=True) == [1, 4, 5, 6, 7]
    assert row("strided", causal=False) == [1, 4, 5, 6, 7, 8, 9]
    # fixed: block {6, 7, 8}, or j mod 3 = 2 (the last cell of each block)
    assert row("fixed", causal=True) == [2, 5, 6, 7]
    assert row("fixed", causal=False) == [2, 5, 6, 7, 8]
    assert row("fixed", causal=False, summary=2) == [1, 2, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("name", ["strided", "fixed"])
@pytest.mark.parametrize("causal", [False, True])
def test_strided_weights_are_exactly_zero_outside_the_pattern(name: str, causal: bool) -> None:
    options = OPTIONS[name]
    mechanism = build_mechanism(options, D_K)
    q, k, v = qkv()
    mask = lengths_mask()
    positions = torch.arange(40)
    pattern = sparse_pattern(
        positions, positions, options.stride, options.pattern.value, options.summary, causal
    )
    assert 0.1 < pattern.float().mean() < 0.6  # really sparse, not trivially full or empty
    context, weights = mechanism(q, k, v, mask, causal=causal, need_weights=True)
    allowed = pattern & mask[:, None, None, :]  # (B, 1, T, S)
    assert torch.all(weights.masked_select(~allowed) == 0)
    assert torch.all(weights.masked_select(allowed.expand_as(weights)) > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 40))
    fast, _ = mechanism(q, k, v, mask, causal=causal)  # fused SDPA path
    torch.testing.assert_close(fast, context, atol=ATOL, rtol=0)


def test_longformer_weights_are_exactly_zero_outside_the_pattern() -> None:
    """Window |i - j| <= 2 plus global positions 0..2 that see and are seen by all."""
    q, k, v = qkv()
    mask = lengths_mask()
    context, weights = LongformerSelfAttention(window=2, global_tokens=3)(
        q, k, v, mask, need_weights=True
    )
    i = torch.arange(40)
    pattern = band(40, 2, causal=False) | (i[None, :] < 3) | (i[:, None] < 3)
    assert 0.1 < pattern.float().mean() < 0.3
    allowed = pattern & mask[:, None, None, :]
    assert torch.all(weights.masked_select(~allowed) == 0)
    assert torch.all(weights.masked_select(allowed.expand_as(weights)) > 0)
    expected, expected_weights = explicit_attention(q, k, v, allowed)
    torch.testing.assert_close(context, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    fast, none = LongformerSelfAttention(window=2, global_tokens=3)(q, k, v, mask)
    assert none is None
    torch.testing.assert_close(fast, context, atol=ATOL, rtol=0)


def test_longformer_without_global_tokens_is_local() -> None:
    q, k, v = qkv()
    mask = lengths_mask()
    longformer = LongformerSelfAttention(window=4, global_tokens=0)(q, k, v, mask)[0]
    local = SlidingWindowSelfAttention(4)(q, k, v, mask)[0]
    torch.testing.assert_close(longformer, local, atol=ATOL, rtol=0)


# --- linformer -------------------------------------------------------------------------------


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


# --- linear and performer ----------------------------------------------------------------------


@pytest.mark.parametrize("block", [1, 5, 64])
def test_linear_causal_prefix_sums_equal_the_quadratic_form(block: int) -> None:
    """phi(Q_i)^T S_i / phi(Q_i)^T Z_i == sum_{j<=i} phi(Q_i).phi(K_j) V_j / sum_{j<=i} ..."""
    q, k, v = qkv(length=70)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    similarity = (phi_q @ phi_k.transpose(-2, -1)).tril()  # (B, H, T, T), j <= i
    quadratic = similarity @ v / similarity.sum(-1, keepdim=True)
    sums = empty_sums(2, HEADS, D_K, D_K, q, scaled=False)
    prefix, final = causal_kernel_attention(phi_q, phi_k, v, sums, block=block)
    torch.testing.assert_close(prefix, quadratic, atol=ATOL, rtol=0)
    # the final state is the full sums S = sum_j phi(K_j) V_j^T and Z = sum_j phi(K_j)
    torch.testing.assert_close(final["self_kv"], phi_k.transpose(-2, -1) @ v)
    torch.testing.assert_close(final["self_k_sum"], phi_k.sum(-2))
    module = LinearSelfAttention()(q, k, v, None, causal=True)[0]
    torch.testing.assert_close(module, quadratic, atol=ATOL, rtol=0)


def test_linear_non_causal_equals_the_quadratic_form_with_padding() -> None:
    q, k, v = qkv()
    mask = lengths_mask()
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    similarity = (phi_q @ phi_k.transpose(-2, -1)) * mask[:, None, None, :]
    quadratic = similarity @ v / similarity.sum(-1, keepdim=True)
    torch.testing.assert_close(LinearSelfAttention()(q, k, v, mask)[0], quadratic)


def test_kernel_log_scale_cancels() -> None:
    """Keys given as (phi_j, c_j) with phi(K_j) = phi_j exp(c_j): same result as plain phi."""
    q, k, v = qkv()
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    c = torch.randn(2, HEADS, 40) * 5
    plain = kernel_attention(phi_q, phi_k * torch.exp(c)[..., None], v)
    torch.testing.assert_close(kernel_attention(phi_q, phi_k, v, c), plain)
    sums = empty_sums(2, HEADS, D_K, D_K, q, scaled=True)
    causal, _ = causal_kernel_attention(phi_q, phi_k, v, sums, c, block=7)
    similarity = (phi_q @ (phi_k * torch.exp(c)[..., None]).transpose(-2, -1)).tril()
    torch.testing.assert_close(causal, similarity @ v / similarity.sum(-1, keepdim=True))


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


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_kinds_compute_in_float32_under_float16_autocast(name: str, causal: bool) -> None:
    """The context is the float32 one rounded once to float16 (not float16 sums), and at
    GradScaler's first loss scale, 2^16, the inputs' gradients are the float32 ones rounded:
    finite where those fit in float16, so no update is skipped for the kernel's own overflow
    (float16 running sums give the causal performer NaN gradients)."""
    mechanism = make(name).mechanism
    half = [x.half().requires_grad_() for x in qkv()]
    full = [x.detach().float().requires_grad_() for x in half]
    mask = lengths_mask()
    exact, _ = mechanism(*full, mask, causal=causal)
    (exact.mean() * 2.0**16).backward()
    with torch.autocast("cpu", dtype=torch.float16):
        context, _ = mechanism(*half, mask, causal=causal)
        (context.float().mean() * 2.0**16).backward()
    assert context.dtype == torch.float16
    torch.testing.assert_close(context, exact.half(), atol=0, rtol=0)
    for low, high in zip(half, full, strict=True):
        largest = high.grad.abs().max().item()
        assert largest < torch.finfo(torch.float16).max  # each fits: an overflow is the kernel's
        # float16's rounding of the upstream gradient and of the result: a few units in the
        # last place of the largest entry (eps = 2^-10)
        torch.testing.assert_close(low.grad.float(), high.grad, atol=3e-3 * largest, rtol=0)


# --- every kind: masks, padding, decoding, errors ---------------------------------------------


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


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_kernel_kinds_refuse_to_return_weights(name: str) -> None:
    module = make(name)
    assert not module.has_weights
    x = torch.randn(1, 5, D_MODEL)
    with pytest.raises(ValueError, match="has no attention weights"):
        module(x, x, x, need_weights=True)


@pytest.mark.parametrize("name", ["linformer", "longformer"])
def test_encoder_only_kinds_refuse_causal_use(name: str) -> None:
    with pytest.raises(ValueError, match="not causal"):
        build_self_attention(OPTIONS[name], D_MODEL, HEADS, causal=True)
    module = make(name)
    x = torch.randn(1, 5, D_MODEL)
    with pytest.raises(ValueError, match="cannot be causal"):
        module(x, x, x, is_causal=True)


def test_only_key_padding_masks_and_self_attention() -> None:
    module = make("local")
    x = torch.randn(2, 5, D_MODEL)
    with pytest.raises(ValueError, match="key padding mask"):
        module(x, x, x, torch.ones(2, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="as many queries as keys"):
        module(x[:, :3], x, x)


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
