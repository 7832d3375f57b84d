"""Multi-head attention: shapes, fast path == explicit path, masks, fully masked rows,
KV caching."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnseq.attention.masks import (
    as_attention_mask,
    bottom_right_causal_mask,
    causal_mask,
    padding_mask,
)
from attnseq.attention.multihead import MultiHeadAttention

D_MODEL, HEADS = 32, 4
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def make_attention(seed: int = 0, bias: bool = True) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(D_MODEL, HEADS, dropout=0.0, bias=bias).eval()


def inputs(batch: int = 3, tgt_len: int = 4, src_len: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(batch, tgt_len, D_MODEL, generator=generator)
    memory = torch.randn(batch, src_len, D_MODEL, generator=generator)
    return query, memory


def both_paths(
    attn: MultiHeadAttention, query: torch.Tensor, memory: torch.Tensor, **kwargs: object
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    fast, no_weights = attn(query, memory, memory, **kwargs)
    explicit, weights = attn(query, memory, memory, need_weights=True, **kwargs)
    assert no_weights is None and weights is not None
    return fast, explicit, weights


def test_shapes() -> None:
    attn = make_attention()
    query, memory = inputs(batch=2, tgt_len=3, src_len=7)
    out, weights = attn(query, memory, memory, need_weights=True)
    assert out.shape == (2, 3, D_MODEL)
    assert weights is not None and weights.shape == (2, HEADS, 3, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 3))
    keys, values = attn.project_kv(memory, memory)
    assert keys.shape == values.shape == (2, HEADS, 7, D_MODEL // HEADS)


def test_heads_must_divide_d_model() -> None:
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(30, 4)


def test_explicit_path_matches_reference_formula() -> None:
    """Concat(head_i) W^O with head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V."""
    attn = make_attention()
    query, memory = inputs(batch=1, tgt_len=2, src_len=3)
    d_k = D_MODEL // HEADS
    heads = []
    for i in range(HEADS):
        cols = slice(i * d_k, (i + 1) * d_k)
        q = query[0] @ attn.q_proj.weight[cols].T + attn.q_proj.bias[cols]  # (T, d_k)
        k = memory[0] @ attn.k_proj.weight[cols].T + attn.k_proj.bias[cols]  # (S, d_k)
        v = memory[0] @ attn.v_proj.weight[cols].T + attn.v_proj.bias[cols]  # (S, d_k)
        heads.append(torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1) @ v)
    expected = attn.out_proj(torch.cat(heads, dim=-1))  # (T, d_model)
    fast, explicit, _ = both_paths(attn, query, memory)
    torch.testing.assert_close(explicit[0], expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(fast[0], expected, atol=ATOL, rtol=0)


def test_fast_equals_explicit_without_mask() -> None:
    fast, explicit, _ = both_paths(make_attention(), *inputs())
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)


def test_fast_equals_explicit_with_padding_mask() -> None:
    query, memory = inputs(batch=3, src_len=5)
    mask = padding_mask(torch.tensor([5, 2, 3]), 5)  # (B, S)
    fast, explicit, weights = both_paths(make_attention(), query, memory, mask=mask)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    assert torch.all(weights[1, :, :, 2:] == 0) and torch.all(weights[2, :, :, 3:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, HEADS, 4))


def test_padding_does_not_change_real_rows() -> None:
    """A padded row gives the same output as the same sequence without padding."""
    attn = make_attention()
    query, memory = inputs(batch=1, src_len=5)
    mask = padding_mask(torch.tensor([3]), 5)
    garbage = memory.clone()
    garbage[:, 3:] = 1e3  # anything at padded positions must be ignored
    padded, _ = attn(query, garbage, garbage, mask)
    short, _ = attn(query, memory[:, :3], memory[:, :3])
    torch.testing.assert_close(padded, short, atol=ATOL, rtol=0)


def test_fast_equals_explicit_with_causal_mask() -> None:
    attn = make_attention()
    x, _ = inputs(tgt_len=6)
    fast, explicit, weights = both_paths(attn, x, x, is_causal=True)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    above = ~causal_mask(6)  # (T, T), True strictly above the diagonal
    assert torch.all(weights[:, :, above] == 0)
    # the same through an explicit 4-D causal mask
    masked, _ = attn(x, x, x, causal_mask(6)[None, None])
    torch.testing.assert_close(masked, explicit, atol=ATOL, rtol=0)


def test_fast_equals_explicit_with_causal_and_padding_mask() -> None:
    attn = make_attention()
    x, _ = inputs(tgt_len=5)
    mask = padding_mask(torch.tensor([5, 4, 2]), 5)
    fast, explicit, weights = both_paths(attn, x, x, mask=mask, is_causal=True)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    assert torch.all(weights[:, :, ~causal_mask(5)] == 0)
    assert torch.all(weights[2, :, :, 2:] == 0)


def test_fast_equals_explicit_with_per_query_mask() -> None:
    query, memory = inputs(batch=2, tgt_len=3, src_len=4)
    mask = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[..., 0] = True  # no empty rows here; those have their own test
    fast, explicit, weights = both_paths(make_attention(), query, memory, mask=mask)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    assert torch.all(weights.masked_select(~mask[:, None]) == 0)


@pytest.mark.parametrize("bias", [True, False])
def test_fully_masked_rows_give_zeros_not_nan(bias: bool) -> None:
    attn = make_attention(bias=bias)
    query, memory = inputs(batch=2, tgt_len=3, src_len=4)
    query.requires_grad_(True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0] = False  # every query of row 0 sees nothing (an empty source)
    mask[1, 1] = False  # one query of row 1 sees nothing
    fast, explicit, weights = both_paths(attn, query, memory, mask=mask)
    # zero context, so the output is what W^O maps zero to: its bias (or exactly zero)
    empty_output = attn.out_proj.bias if bias else torch.zeros(D_MODEL)
    for out in (fast, explicit):
        assert not torch.isnan(out).any()
        torch.testing.assert_close(out[0], empty_output.expand(3, D_MODEL), atol=0, rtol=0)
        torch.testing.assert_close(out[1, 1], empty_output, atol=0, rtol=0)
    assert torch.all(weights[0] == 0) and torch.all(weights[1, :, 1] == 0)
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)
    (fast.sum() + explicit.sum()).backward()
    assert query.grad is not None and torch.isfinite(query.grad).all()


def nan_prone_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """SDPA as the fused GPU kernels behave: an all-False bool row gives 0/0 = NaN."""
    assert dropout_p == 0.0 and not is_causal
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def test_fast_path_survives_kernels_that_give_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU math kernel already returns zeros for fully masked rows, the GPU kernels need not:
    emulate them and check that the module still returns the explicit path's result."""
    attn = make_attention()
    query, memory = inputs(batch=2, tgt_len=3, src_len=4)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0] = False
    mask[1, 2] = False
    explicit, _ = attn(query, memory, memory, mask, need_weights=True)
    nothing_allowed = torch.zeros(1, 1, 1, 2, dtype=torch.bool)  # (B, H, T, S), T = 1, S = 2
    q, kv = torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 2, 2)
    assert torch.isnan(nan_prone_sdpa(q, kv, kv, nothing_allowed)).all()  # the emulation works
    monkeypatch.setattr(F, "scaled_dot_product_attention", nan_prone_sdpa)
    fast, _ = attn(query, memory, memory, mask)
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)


def test_attention_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D_MODEL, HEADS, dropout=0.5)
    query, memory = inputs()
    attn.eval()
    first, _ = attn(query, memory, memory)
    second, _ = attn(query, memory, memory)
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    attn.train()
    for need_weights in (False, True):
        dropped, _ = attn(query, memory, memory, need_weights=need_weights)
        assert not torch.allclose(dropped, first, atol=1e-3)


def test_cross_attention_with_precomputed_memory_kv() -> None:
    """Cross-attention: project the memory once, then attend step by step."""
    attn = make_attention()
    query, memory = inputs(tgt_len=4, src_len=5)
    mask = padding_mask(torch.tensor([5, 3, 1]), 5)
    full, full_weights = attn(query, memory, memory, mask, need_weights=True)
    memory_kv = attn.project_kv(memory, memory)
    for t in range(4):
        for need_weights in (False, True):
            step, weights = attn.attend(
                query[:, t : t + 1], *memory_kv, mask, need_weights=need_weights
            )
            torch.testing.assert_close(step[:, 0], full[:, t], atol=ATOL, rtol=0)
            if need_weights:
                assert weights is not None and full_weights is not None
                torch.testing.assert_close(
                    weights[:, :, 0], full_weights[:, :, t], atol=ATOL, rtol=0
                )


def test_incremental_self_attention_with_kv_cache() -> None:
    """Appending one step's K/V at a time and attending causally equals full causal attention."""
    attn = make_attention()
    x, _ = inputs(tgt_len=6)
    full, full_weights = attn(x, x, x, is_causal=True, need_weights=True)
    batch = x.size(0)
    empty = torch.zeros(batch, HEADS, 0, D_MODEL // HEADS)
    cache = (empty, empty)
    for t in range(6):
        new = x[:, t : t + 1]  # (B, 1, d_model)
        cache = attn.append_kv(cache, new, new)
        assert cache[0].shape == (batch, HEADS, t + 1, D_MODEL // HEADS)
        for need_weights in (False, True):
            step, weights = attn.attend(new, *cache, is_causal=True, need_weights=need_weights)
            torch.testing.assert_close(step[:, 0], full[:, t], atol=ATOL, rtol=0)
            if need_weights:
                assert weights is not None and full_weights is not None
                torch.testing.assert_close(
                    weights[:, :, 0], full_weights[:, :, t, : t + 1], atol=ATOL, rtol=0
                )


def test_chunked_decoding_uses_bottom_right_causal_mask() -> None:
    """Several new queries after a cache: each sees the cache and the new ones up to itself."""
    attn = make_attention()
    x, _ = inputs(tgt_len=6)
    full, _ = attn(x, x, x, is_causal=True)
    cache = attn.project_kv(x[:, :2], x[:, :2])
    cache = attn.append_kv(cache, x[:, 2:], x[:, 2:])  # (B, H, 6, d_k)
    for need_weights in (False, True):
        chunk, _ = attn.attend(x[:, 2:], *cache, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(chunk, full[:, 2:], atol=ATOL, rtol=0)
    expected = torch.tensor([[True, True, True, False], [True, True, True, True]])
    assert torch.equal(bottom_right_causal_mask(2, 4), expected)


def test_mask_shapes() -> None:
    assert as_attention_mask(torch.ones(2, 5, dtype=torch.bool)).shape == (2, 1, 1, 5)
    assert as_attention_mask(torch.ones(2, 3, 5, dtype=torch.bool)).shape == (2, 1, 3, 5)
    assert as_attention_mask(torch.ones(2, 4, 3, 5, dtype=torch.bool)).shape == (2, 4, 3, 5)
    with pytest.raises(ValueError, match="dimensions"):
        as_attention_mask(torch.ones(5, dtype=torch.bool))


def test_unscaled_attention_drops_the_sqrt_dk() -> None:
    """scaled=False: head_i = softmax(Q W_i^Q (K W_i^K)^T) V W_i^V on both paths, so its
    weights are sharper than the scaled module's with the same projections."""
    scaled = make_attention()
    unscaled = MultiHeadAttention(D_MODEL, HEADS, dropout=0.0, scaled=False).eval()
    unscaled.load_state_dict(scaled.state_dict())
    query, memory = inputs(batch=1, tgt_len=2, src_len=3)
    d_k = D_MODEL // HEADS
    heads = []
    for i in range(HEADS):
        cols = slice(i * d_k, (i + 1) * d_k)
        q = query[0] @ unscaled.q_proj.weight[cols].T + unscaled.q_proj.bias[cols]
        k = memory[0] @ unscaled.k_proj.weight[cols].T + unscaled.k_proj.bias[cols]
        v = memory[0] @ unscaled.v_proj.weight[cols].T + unscaled.v_proj.bias[cols]
        heads.append(torch.softmax(q @ k.T, dim=-1) @ v)
    expected = unscaled.out_proj(torch.cat(heads, dim=-1))
    fast, explicit, weights = both_paths(unscaled, query, memory)
    torch.testing.assert_close(explicit[0], expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(fast[0], expected, atol=ATOL, rtol=0)
    _, _, scaled_weights = both_paths(scaled, query, memory)

    def entropy(w: torch.Tensor) -> torch.Tensor:
        return -(w * w.clamp_min(1e-12).log()).sum(-1).mean()

    assert entropy(weights) < entropy(scaled_weights)


def test_unscaled_incremental_steps_equal_the_full_pass() -> None:
    attn = MultiHeadAttention(D_MODEL, HEADS, dropout=0.0, scaled=False).eval()
    x, _ = inputs(tgt_len=4)
    full, _ = attn(x, x, x, is_causal=True)
    cache = attn.empty_cache(x.size(0), x)
    for t in range(4):
        step, _, cache = attn.attend_cached(x[:, t : t + 1], cache)
        torch.testing.assert_close(step[:, 0], full[:, t], atol=ATOL, rtol=0)
