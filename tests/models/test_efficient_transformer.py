"""The transformer with each efficient self-attention kind: weights where the kind has them,
incremental decoding equal to the forward pass (also after reorder_state), no NaN for an empty
source, a tiny model of every kind overfits a batch, and encoder-only kinds stay out of the
decoder."""

import time

import pytest
import torch
from helpers import overfit_reversal, reversal_batch, tiny_transformer

from attnseq.attention.masks import padding_mask
from attnseq.config.choices import AttentionKind
from attnseq.config.schema import AttentionConfig
from attnseq.models.seq2seq import Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq

PAD, BOS, EOS = 0, 1, 2
VOCAB = 12
ATOL = 1e-5
LAYERS, HEADS = 2, 2  # helpers.tiny_transformer's
VOCABS = Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS)
OPTIONS = {
    "full": AttentionConfig(kind=AttentionKind.full),
    "local": AttentionConfig(kind=AttentionKind.local, D=2),
    "strided": AttentionConfig(kind=AttentionKind.strided, stride=3),
    "longformer": AttentionConfig(kind=AttentionKind.longformer, D=1, global_tokens=1),
    "linformer": AttentionConfig(kind=AttentionKind.linformer, proj_dim=4),  # n: max_positions
    "linear": AttentionConfig(kind=AttentionKind.linear),
    "performer": AttentionConfig(kind=AttentionKind.performer, features=32),
    "bigbird": AttentionConfig(kind=AttentionKind.bigbird, block_size=2, random_blocks=1),
}
DECODER_KINDS = ["local", "strided", "linear", "performer", "bigbird"]


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def model_of_kind(kind: str, seed: int = 0, **overrides: object) -> TransformerSeq2Seq:
    """helpers.tiny_transformer of 80 positions with the self-attention `kind`, in the decoder
    too where the kind can be causal."""
    options: dict = {"max_positions": 80, "self_attention": OPTIONS[kind]}
    options["decoder_self_attention"] = kind in DECODER_KINDS
    return tiny_transformer(VOCABS, seed, **{**options, **overrides})


def padded_batch(tgt_len: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sources of lengths 9, 4, 7 (right-padded), BOS-prefixed targets."""
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([9, 4, 7])
    src = torch.randint(3, VOCAB, (3, 9), generator=generator)
    src = src.masked_fill(~padding_mask(lengths, 9), PAD)
    tgt_in = torch.randint(3, VOCAB, (3, tgt_len), generator=generator)
    tgt_in[:, 0] = BOS
    return src, lengths, tgt_in


def decode_all(model: TransformerSeq2Seq, state: dict, tokens: torch.Tensor):
    logits = []
    for t in range(tokens.size(1)):
        step_logits, _, state = model.decode_step(tokens[:, t], state)
        logits.append(step_logits)
    return torch.stack(logits, dim=1), state


def test_kinds_reach_the_layers() -> None:
    model = model_of_kind("local")

    def kinds(modules: list) -> set[str]:
        return {module.mechanism.kind for module in modules}

    assert kinds([layer.self_attn for layer in model.encoder.layers]) == {"local"}
    assert kinds([layer.self_attn for layer in model.decoder_layers]) == {"local"}
    assert kinds([layer.cross_attn for layer in model.decoder_layers]) == {"full"}
    encoder_only = model_of_kind("local", decoder_self_attention=False)
    assert kinds([layer.self_attn for layer in encoder_only.decoder_layers]) == {"full"}
    full = model_of_kind("full")
    assert kinds([layer.self_attn for layer in full.encoder.layers]) == {"full"}


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_weights_where_the_kind_has_them(kind: str) -> None:
    model = model_of_kind(kind).eval()
    src, lengths, tgt_in = padded_batch()
    out = model(src, lengths, tgt_in, need_weights=True)
    assert out.attention is not None and out.attention.shape == (3, LAYERS, HEADS, 6, 9)
    has_weights = kind not in ("linear", "performer")
    assert (out.encoder_self_attention is not None) == has_weights
    if has_weights:
        encoder = out.encoder_self_attention  # (B, L, H, S, S)
        assert encoder.shape == (3, LAYERS, HEADS, 9, 9)
        assert torch.all(encoder[1, ..., 4:] == 0)  # padded keys of row 1 get no weight
        assert out.decoder_self_attention.shape == (3, LAYERS, HEADS, 6, 6)
    fast = model(src, lengths, tgt_in)
    torch.testing.assert_close(fast.logits, out.logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_incremental_decoding_equals_forward(kind: str) -> None:
    """70 target positions: beyond the window, the stride and one causal block of 64."""
    model = model_of_kind(kind).eval()
    src, lengths, tgt_in = padded_batch(tgt_len=70)
    expected = model(src, lengths, tgt_in).logits
    with torch.no_grad():
        logits, state = decode_all(model, model.start_decoding(src, lengths), tgt_in)
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)
    assert state["length"] == 70 and torch.equal(state["step"], torch.full((3,), 70))


@pytest.mark.parametrize("kind", DECODER_KINDS)
def test_reorder_state_then_continue_decoding(kind: str) -> None:
    model = model_of_kind(kind).eval()
    src, lengths, tgt_in = padded_batch(tgt_len=10)
    index = torch.tensor([2, 2, 0])
    expected = model(src[index], lengths[index], tgt_in[index]).logits
    with torch.no_grad():
        _, state = decode_all(model, model.start_decoding(src, lengths), tgt_in[:, :4])
        state = model.reorder_state(state, index)
        rest, _ = decode_all(model, state, tgt_in[index, 4:])
    torch.testing.assert_close(rest, expected[:, 4:], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_empty_source_gives_finite_outputs(kind: str) -> None:
    model = model_of_kind(kind).eval()
    src, _, tgt_in = padded_batch()
    lengths = torch.tensor([9, 0, 7])
    out = model(src, lengths, tgt_in)
    assert torch.isfinite(out.logits).all()
    logits, _, _ = model.decode_step(tgt_in[:, 0], model.start_decoding(src, lengths))
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("kind", ["linformer", "longformer"])
def test_encoder_only_kinds_cannot_be_decoder_self_attention(kind: str) -> None:
    with pytest.raises(ValueError, match="decoder self-attention"):
        model_of_kind(kind, decoder_self_attention=True)


# The default run trains the dense kind, a windowed one and a kernel one; `-m slow` every
# kind (each kind's attention has its own exact tests in tests/attention/).
OVERFIT_BY_DEFAULT = ("full", "local", "linear")


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(kind, marks=() if kind in OVERFIT_BY_DEFAULT else pytest.mark.slow)
        for kind in OPTIONS
    ],
)
def test_tiny_model_of_every_kind_overfits_a_batch(kind: str) -> None:
    """8 sequences of length 12, target = reversed source (as test_transformer.py)."""
    start = time.perf_counter()
    *_, tgt_out = reversal_batch(VOCABS, 12)
    loss, decoded = overfit_reversal(model_of_kind(kind, dropout=0.0), VOCABS, 12, steps=400)
    assert loss < 0.05
    assert torch.equal(decoded, tgt_out)
    assert time.perf_counter() - start < 30
