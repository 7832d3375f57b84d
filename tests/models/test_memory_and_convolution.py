"""The transformer with persistent memory slots and with the convolution sublayer: off is the plain
model (same parameters, same outputs), nothing leaks between the examples of a batch or from
padding, incremental decoding equals the forward pass, and the weights show the memory."""

import pytest
import torch

from attnseq.attention.masks import padding_mask
from attnseq.models.seq2seq import Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.models.transformer_layers import ConvolutionModule

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12
LAYERS, HEADS, SLOTS = 2, 2, 3
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def tiny_model(seed: int = 0, **options: object) -> TransformerSeq2Seq:
    torch.manual_seed(seed)
    sizes: dict = {"d_model": 16, "heads": HEADS, "enc_layers": LAYERS, "dec_layers": LAYERS}
    return TransformerSeq2Seq(
        Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS), ff_dim=32, **sizes, **options
    ).eval()


def batch(src_len: int = 9) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([9, 4, 7])
    src = torch.randint(3, VOCAB, (3, src_len), generator=generator)
    src = src.masked_fill(~padding_mask(lengths, src_len), PAD)
    tgt_in = torch.randint(3, VOCAB, (3, 6), generator=generator)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_off_is_the_plain_model() -> None:
    plain = tiny_model()
    off = tiny_model(memory_slots=0, memory_in_cross=True, conv_kernel=0)
    assert count(off) == count(plain) and list(off.state_dict()) == list(plain.state_dict())
    src, lengths, tgt_in = batch()
    assert torch.equal(off(src, lengths, tgt_in).logits, plain(src, lengths, tgt_in).logits)


def test_parameter_counts() -> None:
    """2 H N d_k per attention: 2 encoder self + 2 decoder self (+ 2 cross)."""
    plain, d_k = count(tiny_model()), 16 // HEADS
    per_attention = 2 * HEADS * SLOTS * d_k
    assert count(tiny_model(memory_slots=SLOTS)) == plain + 4 * per_attention
    assert count(tiny_model(memory_slots=SLOTS, memory_in_cross=True)) == plain + 6 * per_attention
    # conv: pointwise d -> 2d, depthwise k d + d, LayerNorm 2d, pointwise d -> d, residual norm 2d
    d, k = 16, 5
    conv = (d * 2 * d + 2 * d) + (k * d + d) + 2 * d + (d * d + d) + 2 * d
    assert count(tiny_model(conv_kernel=k)) == plain + LAYERS * conv


@pytest.mark.parametrize(
    "options", [{"memory_slots": SLOTS, "memory_in_cross": True}, {"conv_kernel": 3}]
)
def test_examples_do_not_leak_into_each_other(options: dict) -> None:
    """Changing example 1 (source and target) leaves the outputs of examples 0 and 2 unchanged."""
    model = tiny_model(**options)
    src, lengths, tgt_in = batch()
    expected = model(src, lengths, tgt_in).logits
    src[1, :4], tgt_in[1, 1:] = (src[1, :4] + 1) % VOCAB, (tgt_in[1, 1:] + 2) % VOCAB
    changed = model(src, lengths, tgt_in).logits
    torch.testing.assert_close(changed[[0, 2]], expected[[0, 2]], atol=ATOL, rtol=0)
    assert not torch.allclose(changed[1], expected[1])


@pytest.mark.parametrize(
    "options",
    [{"memory_slots": SLOTS}, {"memory_slots": SLOTS, "memory_in_cross": True}, {"conv_kernel": 5}],
)
def test_incremental_decoding_equals_forward(options: dict) -> None:
    model = tiny_model(**options)
    src, lengths, tgt_in = batch()
    expected = model(src, lengths, tgt_in).logits
    state = model.start_decoding(src, lengths)
    logits = []
    with torch.no_grad():
        for t in range(tgt_in.size(1)):
            step_logits, _, state = model.decode_step(tgt_in[:, t], state)
            logits.append(step_logits)
    torch.testing.assert_close(torch.stack(logits, dim=1), expected, atol=ATOL, rtol=0)


def test_weights_show_the_memory_columns() -> None:
    model = tiny_model(memory_slots=SLOTS, memory_in_cross=True)
    src, lengths, tgt_in = batch()
    out = model(src, lengths, tgt_in, need_weights=True)
    encoder = out.extras["encoder_self_attention"]  # (B, L, H, S, S + N)
    assert encoder.shape == (3, LAYERS, HEADS, 9, 9 + SLOTS)
    torch.testing.assert_close(encoder.sum(-1), torch.ones(3, LAYERS, HEADS, 9))
    assert torch.all(encoder[1, ..., 4:9] == 0) and torch.all(encoder[..., 9:] > 0)
    decoder = out.extras["decoder_self_attention"]
    assert decoder.shape == (3, LAYERS, HEADS, 6, 6 + SLOTS)
    assert out.attention.shape == (3, LAYERS, HEADS, 6, 9)  # cross: the source columns only
    fast = model(src, lengths, tgt_in)
    torch.testing.assert_close(fast.logits, out.logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("options", [{"conv_kernel": 3}, {"conv_kernel": 7, "norm": "post"}])
def test_padding_does_not_change_real_positions(options: dict) -> None:
    """The same sources with 6 more padding columns: equal memory at the real positions."""
    model = tiny_model(**options)
    src, lengths, _ = batch()
    memory, mask, _ = model.encode(src, lengths)
    padded = torch.cat([src, torch.full((3, 6), PAD)], dim=1)
    more, _, _ = model.encode(padded, lengths)
    real = mask[..., None]
    torch.testing.assert_close(more[:, :9] * real, memory * real, atol=ATOL, rtol=0)
    alone, _, _ = model.encode(src[1:2, :4], lengths[1:2])  # and no padding at all
    torch.testing.assert_close(memory[1:2, :4], alone, atol=ATOL, rtol=0)


def test_convolution_sees_k_neighbours() -> None:
    """Changing position 5 changes the module's output at 5 - k // 2 .. 5 + k // 2 only."""
    torch.manual_seed(0)
    module = ConvolutionModule(8, kernel=3, dropout=0.0)
    x = torch.randn(1, 10, 8)
    changed = x.clone()
    changed[0, 5] += 1.0
    difference = (module(changed, None) - module(x, None)).abs().sum(-1)[0]
    assert torch.all(difference[4:7] > 0)
    assert torch.all(difference[:4] == 0) and torch.all(difference[7:] == 0)
    with pytest.raises(ValueError, match="odd"):
        ConvolutionModule(8, kernel=4, dropout=0.0)


def test_the_sublayer_sits_between_self_attention_and_feed_forward() -> None:
    layer = tiny_model(conv_kernel=3).encoder.layers[0]
    names = [name for name, _ in layer.named_children()]
    assert names.index("self_attn") < names.index("conv") < names.index("ff")
    assert layer.conv.depthwise.groups == 16  # depthwise: one filter per channel
