"""Linear attention and its kernel (attnseq/attention/linear.py): causal prefix sums and the
non-causal form against the quadratic ones, the keys' log scale cancelling, and float32
computation under float16 autocast (linear and performer)."""

import pytest
import torch
from mechanism_inputs import ATOL, D_K, HEADS, lengths_mask, make, qkv

from attnseq.attention.linear import (
    LinearSelfAttention,
    causal_kernel_attention,
    elu_feature_map,
    empty_sums,
    kernel_attention,
)

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


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
