"""Transformer encoder-decoder: paths agree, masks hold, incremental decoding equals teacher
forcing (also after reorder_state), a tiny model overfits a batch, every option builds."""

import math
import time

import pytest
import torch
from helpers import overfit_reversal, reversal_batch, tiny_transformer

from attnseq.attention.masks import causal_mask, padding_mask
from attnseq.errors import UserError
from attnseq.models.positional import (
    LearnedPositionalEncoding,
    build_positional_encoding,
    make_positions,
)
from attnseq.models.seq2seq import TeacherForcing, Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq

PAD, BOS, EOS = 0, 1, 2
VOCAB = 12
ATOL = 1e-5
LAYERS, HEADS = 2, 2  # helpers.tiny_transformer's
VOCABS = Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS)


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sources of lengths 5, 3, 4 (right-padded) and BOS-prefixed targets of length 6."""
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([5, 3, 4])
    src = torch.randint(3, VOCAB, (3, 5), generator=generator)
    src = src.masked_fill(~padding_mask(lengths, 5), PAD)
    tgt_in = torch.randint(3, VOCAB, (3, 6), generator=generator)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


# --- construction ----------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("tie", [True, False])
def test_every_option_constructs_and_runs(norm: str, positions: str, tie: bool) -> None:
    model = tiny_transformer(VOCABS, norm=norm, positions=positions, tie_embeddings=tie).eval()
    src, lengths, tgt_in = padded_batch()
    out = model(src, lengths, tgt_in, need_weights=True)
    assert out.logits.shape == (3, 6, VOCAB)
    assert out.attention is not None and out.attention.shape == (3, LAYERS, HEADS, 6, 5)
    assert out.decoder_self_attention.shape == (3, LAYERS, HEADS, 6, 6)
    assert out.encoder_self_attention.shape == (3, LAYERS, HEADS, 5, 5)
    assert torch.isfinite(out.logits).all()
    assert (model.output_proj.weight is model.tgt_embed.weight) == tie
    fast = model(src, lengths, tgt_in)
    assert fast.attention is None and fast.encoder_self_attention is None
    assert fast.decoder_self_attention is None
    fast.logits.sum().backward()  # trains through the fast path too
    is_pre = isinstance(model.decoder_norm, torch.nn.LayerNorm)
    assert is_pre == (norm == "pre")


def test_shared_source_and_target_embeddings() -> None:
    model = tiny_transformer(VOCABS, share_src_tgt_embeddings=True)
    assert model.src_embed is model.tgt_embed is not None
    with pytest.raises(UserError, match="equal vocabulary sizes"):
        TransformerSeq2Seq(
            Vocabularies(10, 12, PAD, BOS, EOS), d_model=32, heads=2, share_src_tgt_embeddings=True
        )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 30, "heads": 4}, "divisible"),
        ({"norm": "sandwich"}, "norm"),
        ({"positions": "rotary"}, "positional"),
        ({"dec_layers": 0}, "dec_layers"),
        ({"enc_layers": 0}, "enc_layers"),
    ],
)
def test_bad_options_raise_value_error(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_transformer(VOCABS, **overrides)


def test_init_scales() -> None:
    model = tiny_transformer(VOCABS, d_model=64, heads=4, tie_embeddings=False)
    weight = model.tgt_embed.weight[3:]  # not the padding row, which is zero
    assert weight.std().item() == pytest.approx(64**-0.5, rel=0.1)
    assert torch.all(model.tgt_embed.weight[PAD] == 0)
    q_proj = model.encoder.layers[0].self_attn.q_proj.weight
    bound = math.sqrt(6 / (64 + 64))  # xavier uniform
    assert q_proj.abs().max().item() <= bound and q_proj.abs().max().item() > 0.9 * bound


def test_learned_positions_reject_too_long_inputs() -> None:
    model = tiny_transformer(VOCABS, positions="learned", max_positions=4).eval()
    src, lengths, tgt_in = padded_batch()
    with pytest.raises(ValueError, match="max_positions"):
        model(src, lengths, tgt_in)


# --- fast vs explicit path, masks ----------------------------------------------------------------


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_fast_path_equals_explicit_path(norm: str) -> None:
    model = tiny_transformer(VOCABS, norm=norm).eval()
    src, lengths, tgt_in = padded_batch()
    fast = model(src, lengths, tgt_in, need_weights=False).logits
    explicit = model(src, lengths, tgt_in, need_weights=True).logits
    torch.testing.assert_close(fast, explicit, atol=ATOL, rtol=0)


def test_attention_weights_respect_masks() -> None:
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    out = model(src, lengths, tgt_in, need_weights=True)
    assert out.attention is not None
    decoder_self = out.decoder_self_attention  # (B, L, H, T, T)
    assert torch.all(decoder_self[..., ~causal_mask(6)] == 0)  # exactly zero above the diagonal
    src_mask = padding_mask(lengths, 5)[:, None, None, None, :]  # (B, 1, 1, 1, S)
    for weights in (out.attention, out.encoder_self_attention):
        assert torch.all(weights.masked_select(~src_mask) == 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    torch.testing.assert_close(decoder_self.sum(-1), torch.ones(decoder_self.shape[:-1]))


def test_source_padding_does_not_change_outputs() -> None:
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    batched = model(src, lengths, tgt_in).logits
    alone = model(src[1:2, :3], lengths[1:2], tgt_in[1:2]).logits
    torch.testing.assert_close(batched[1:2], alone, atol=ATOL, rtol=0)


def test_decoder_is_causal() -> None:
    """Changing a later target token does not change earlier logits."""
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    changed = tgt_in.clone()
    changed[:, 4] = (changed[:, 4] + 1 - 3) % (VOCAB - 3) + 3
    before = model(src, lengths, tgt_in).logits
    after = model(src, lengths, changed).logits
    torch.testing.assert_close(before[:, :4], after[:, :4], atol=ATOL, rtol=0)
    assert not torch.allclose(before[:, 4:], after[:, 4:])


# --- incremental decoding ---------------------------------------------------------------


def decode_all(
    model: TransformerSeq2Seq,
    state: dict,
    tokens: torch.Tensor,
    need_weights: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, dict]:
    """Feed tokens (B, T) one step at a time; stack logits (B, T, V) and attention
    (B, L, H, T, S)."""
    logits, attention = [], []
    for t in range(tokens.size(1)):
        step_logits, step_attention, state = model.decode_step(tokens[:, t], state, need_weights)
        logits.append(step_logits)
        if step_attention is not None:
            attention.append(step_attention)
    stacked_attention = torch.stack(attention, dim=3) if attention else None
    return torch.stack(logits, dim=1), stacked_attention, state


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_incremental_decoding_equals_forward(norm: str, positions: str) -> None:
    model = tiny_transformer(VOCABS, norm=norm, positions=positions).eval()
    src, lengths, tgt_in = padded_batch()
    full = model(src, lengths, tgt_in, need_weights=True)
    assert full.attention is not None
    with torch.no_grad():
        for need_weights in (False, True):
            state = model.start_decoding(src, lengths)
            logits, attention, state = decode_all(model, state, tgt_in, need_weights)
            torch.testing.assert_close(logits, full.logits, atol=ATOL, rtol=0)
            if need_weights:
                assert attention is not None and attention.shape == (3, LAYERS, HEADS, 6, 5)
                torch.testing.assert_close(attention, full.attention, atol=ATOL, rtol=0)
            else:
                assert attention is None
    assert torch.equal(state["step"], torch.full((3,), 6))
    assert state["layers"][0]["self_k"].shape == (3, HEADS, 6, 16)


def test_decoder_pass_gives_the_asked_layer_weights_on_the_fast_path() -> None:
    """weights_of: one layer's cross-attention without need_weights, as the explicit pass has
    it; the pass's final output is what the output projection reads."""
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    output, decoder, memory = model.decoder_pass(TeacherForcing(src, lengths, tgt_in), weights_of=1)
    assert output.attention is None and memory.shape == (3, 5, 32)
    assert [out.cross_weights is None for out in decoder.layers] == [True, False]
    assert decoder.inputs.shape == decoder.decoded.shape == (3, 6, 32)
    torch.testing.assert_close(model.output_proj(decoder.decoded), output.logits)
    explicit = model(src, lengths, tgt_in, need_weights=True)  # attention (B, L, H, T, S)
    torch.testing.assert_close(decoder.layers[1].cross_weights, explicit.attention[:, 1])
    with torch.no_grad():
        step, attention, _ = model.incremental_step(
            tgt_in[:, 0], model.start_decoding(src, lengths), weights_of=0
        )
    assert attention is None and step.layers[1].cross_weights is None
    torch.testing.assert_close(
        step.layers[0].cross_weights[:, :, 0], explicit.attention[:, 0, :, 0], atol=ATOL, rtol=0
    )


def test_decoding_state_layout_is_batch_first() -> None:
    model = tiny_transformer(VOCABS).eval()
    src, lengths, _ = padded_batch()
    state = model.start_decoding(src, lengths)
    assert state["memory"].shape == (3, 5, 32)
    assert torch.equal(state["memory_mask"], padding_mask(lengths, 5))
    assert torch.equal(state["step"], torch.zeros(3, dtype=torch.long))
    assert len(state["layers"]) == LAYERS
    for cache in state["layers"]:
        assert cache["cross_k"].shape == cache["cross_v"].shape == (3, HEADS, 5, 16)
        assert cache["self_k"].shape == cache["self_v"].shape == (3, HEADS, 0, 16)


def test_decode_step_does_not_modify_its_input_state() -> None:
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    state = model.start_decoding(src, lengths)
    model.decode_step(tgt_in[:, 0], state)
    assert state["layers"][0]["self_k"].size(2) == 0 and torch.all(state["step"] == 0)


def test_reorder_state_then_continue_decoding() -> None:
    """Beam search duplicates and drops rows: after reorder_state([1, 1, 0]) the continued
    decoding equals the forward pass on the reordered batch."""
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    index = torch.tensor([1, 1, 0])
    expected = model(src[index], lengths[index], tgt_in[index], need_weights=True)
    assert expected.attention is not None
    with torch.no_grad():
        state = model.start_decoding(src, lengths)
        prefix_logits, _, state = decode_all(model, state, tgt_in[:, :3], need_weights=False)
        state = model.reorder_state(state, index)
        rest_logits, rest_attention, _ = decode_all(model, state, tgt_in[index, 3:], True)
    torch.testing.assert_close(prefix_logits[index], expected.logits[:, :3], atol=ATOL, rtol=0)
    torch.testing.assert_close(rest_logits, expected.logits[:, 3:], atol=ATOL, rtol=0)
    assert rest_attention is not None
    torch.testing.assert_close(rest_attention, expected.attention[:, :, :, 3:], atol=ATOL, rtol=0)


def test_empty_source_gives_finite_outputs() -> None:
    """A zero-length source row: cross-attention sees nothing, which must not produce NaN."""
    model = tiny_transformer(VOCABS).eval()
    src, lengths, tgt_in = padded_batch()
    lengths = torch.tensor([5, 0, 4])
    for need_weights in (False, True):
        out = model(src, lengths, tgt_in, need_weights=need_weights)
        assert torch.isfinite(out.logits).all()
    state = model.start_decoding(src, lengths)
    logits, attention, _ = model.decode_step(tgt_in[:, 0], state, need_weights=True)
    assert torch.isfinite(logits).all() and attention is not None
    assert torch.all(attention[1] == 0)


# --- training ---------------------------------------------------------------------------------


def test_tiny_transformer_overfits_reversal_batch() -> None:
    """8 sequences of length 6 over 9 symbols, target = reversed source."""
    start = time.perf_counter()
    src, lengths, tgt_in, tgt_out = reversal_batch(VOCABS, 6)
    model = tiny_transformer(VOCABS, dropout=0.0)
    loss, decoded = overfit_reversal(model, VOCABS, 6, steps=300)
    assert loss < 0.05
    assert torch.equal(model(src, lengths, tgt_in).logits.argmax(-1), tgt_out)
    assert torch.equal(decoded, tgt_out)  # greedy incremental decoding reproduces it too
    assert time.perf_counter() - start < 30


def test_learned_positions_with_an_offset_read_the_rows_after_it() -> None:
    encoding = LearnedPositionalEncoding(8, 5, offset=2)  # BART's layout: 5 + 2 rows
    assert encoding.table.weight.shape == (7, 8)
    assert torch.equal(encoding(torch.arange(5)), encoding.table.weight[2:])
    with pytest.raises(ValueError, match="offset goes with learned or sinusoidal_fairseq"):
        build_positional_encoding("sinusoidal", 8, 5, offset=2)


def test_embed_norm_normalises_embeddings_plus_positions_on_both_sides() -> None:
    plain = tiny_transformer(VOCABS, positions="learned", max_positions=16)
    assert not any("embed_norm" in name for name in plain.state_dict())
    normed = tiny_transformer(
        VOCABS, positions="learned", max_positions=16, embed_norm=True, dropout=0.0
    )
    normed.eval()
    src = torch.tensor([[3, 4, 5]])
    positions = make_positions(3)
    summed = normed.src_embed(src) * normed.embed_scale + normed.src_positions(positions)
    with torch.no_grad():
        normed.src_embed_norm.weight.uniform_(0.5, 1.5)
        expected = normed.src_embed_norm(summed)
        got = normed._embed(
            src, normed.src_embed, normed.src_positions, positions, normed.src_embed_norm
        )
    assert torch.allclose(got, expected)
    assert {"src_embed_norm.weight", "tgt_embed_norm.bias"} <= set(normed.state_dict())
