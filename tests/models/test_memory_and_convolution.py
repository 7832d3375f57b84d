"""The transformer with persistent memory slots and with the convolution sublayer: off is the plain
model (same parameters, same outputs), nothing leaks between the examples of a batch or from
padding, incremental decoding equals the forward pass, and the weights show the memory."""

from pathlib import Path

import pytest
import torch
from helpers import assert_refused, tiny_transformer, train_in_process

from attnseq.attention.bigbird import BigBirdSelfAttention
from attnseq.attention.masks import padding_mask
from attnseq.config.conversion import config_from_dict
from attnseq.models import Vocabularies, build_model
from attnseq.models.transformer import TransformerSeq2Seq

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12
LAYERS, HEADS, SLOTS = 2, 2, 3  # layers and heads: helpers.tiny_transformer's
VOCABS = Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS)
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


def narrow_model(seed: int = 0, **options: object) -> TransformerSeq2Seq:
    """helpers.tiny_transformer of d_model 16 and ff_dim 32, in eval mode."""
    return tiny_transformer(VOCABS, seed, d_model=16, ff_dim=32, **options).eval()


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
    plain = narrow_model()
    off = narrow_model(memory_slots=0, memory_in_cross=True, conv_kernel=0)
    assert count(off) == count(plain) and list(off.state_dict()) == list(plain.state_dict())
    src, lengths, tgt_in = batch()
    assert torch.equal(off(src, lengths, tgt_in).logits, plain(src, lengths, tgt_in).logits)


def test_parameter_counts() -> None:
    """2 H N d_k per attention: 2 encoder self + 2 decoder self (+ 2 cross)."""
    plain, d_k = count(narrow_model()), 16 // HEADS
    per_attention = 2 * HEADS * SLOTS * d_k
    assert count(narrow_model(memory_slots=SLOTS)) == plain + 4 * per_attention
    in_cross = narrow_model(memory_slots=SLOTS, memory_in_cross=True)
    assert count(in_cross) == plain + 6 * per_attention
    # conv: pointwise d -> 2d, depthwise k d + d, LayerNorm 2d, pointwise d -> d, residual norm 2d
    d, k = 16, 5
    conv = (d * 2 * d + 2 * d) + (k * d + d) + 2 * d + (d * d + d) + 2 * d
    assert count(narrow_model(conv_kernel=k)) == plain + LAYERS * conv


@pytest.mark.parametrize(
    "options", [{"memory_slots": SLOTS, "memory_in_cross": True}, {"conv_kernel": 3}]
)
def test_examples_do_not_leak_into_each_other(options: dict) -> None:
    """Changing example 1 (source and target) leaves the outputs of examples 0 and 2 unchanged."""
    model = narrow_model(**options)
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
    model = narrow_model(**options)
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
    model = narrow_model(memory_slots=SLOTS, memory_in_cross=True)
    src, lengths, tgt_in = batch()
    out = model(src, lengths, tgt_in, need_weights=True)
    encoder = out.encoder_self_attention  # (B, L, H, S, S + N)
    assert encoder.shape == (3, LAYERS, HEADS, 9, 9 + SLOTS)
    torch.testing.assert_close(encoder.sum(-1), torch.ones(3, LAYERS, HEADS, 9))
    assert torch.all(encoder[1, ..., 4:9] == 0) and torch.all(encoder[..., 9:] > 0)
    decoder = out.decoder_self_attention
    assert decoder.shape == (3, LAYERS, HEADS, 6, 6 + SLOTS)
    assert out.attention.shape == (3, LAYERS, HEADS, 6, 9)  # cross: the source columns only
    fast = model(src, lengths, tgt_in)
    torch.testing.assert_close(fast.logits, out.logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("options", [{"conv_kernel": 3}, {"conv_kernel": 7, "norm": "post"}])
def test_padding_does_not_change_real_positions(options: dict) -> None:
    """The same sources with 6 more padding columns: equal memory at the real positions."""
    model = narrow_model(**options)
    src, lengths, _ = batch()
    memory, mask, _ = model.encode(src, lengths)
    padded = torch.cat([src, torch.full((3, 6), PAD)], dim=1)
    more, _, _ = model.encode(padded, lengths)
    real = mask[..., None]
    torch.testing.assert_close(more[:, :9] * real, memory * real, atol=ATOL, rtol=0)
    alone, _, _ = model.encode(src[1:2, :4], lengths[1:2])  # and no padding at all
    torch.testing.assert_close(memory[1:2, :4], alone, atol=ATOL, rtol=0)


def test_the_sublayer_sits_between_self_attention_and_feed_forward() -> None:
    layer = narrow_model(conv_kernel=3).encoder.layers[0]
    names = [name for name, _ in layer.named_children()]
    assert names.index("self_attn") < names.index("conv") < names.index("ff")
    assert layer.conv.depthwise.groups == 16  # depthwise: one filter per channel


# ------------------------------------------------------------
# The config keys of BigBird, persistent memory and the convolution sublayer: each reaches the
# built model, and invalid combinations end `attnseq train` with one line and exit status 2.


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model.attention.memory_slots=4"], "model.attention.memory_slots=4 is a transformer"),
        (["model.conv_kernel=3"], "model.conv_kernel=3 is a transformer setting"),
        (["model=transformer", "model.conv_kernel=4"], "model.conv_kernel=4 must be odd"),
        (
            ["model=transformer", "model.attention.memory_in_cross=true"],
            "memory_in_cross=true needs memory slots",
        ),
        (
            ["model=transformer", "model.attention.kind=bigbird", "model.attention.memory_slots=2"],
            "memory_slots=2 needs model.attention.kind=full, got bigbird",
        ),
        (
            [
                "model=transformer",
                "model.copy=true",
                "model.attention.memory_slots=2",
                "model.attention.memory_in_cross=true",
            ],
            "memory_in_cross=true cannot be combined with model.copy",
        ),
        (["model=transformer", "model.attention.block_size=0"], "block_size must be >= 1"),
        (["model.attention.kind=bigbird"], "model.attention.kind=bigbird is a transformer"),
    ],
)
def test_invalid_combinations_exit_2(overrides: list[str], expected: str, tmp_path: Path) -> None:
    code, output = train_in_process(tmp_path, *overrides)
    assert_refused(tmp_path, code, output, expected)


def test_the_keys_reach_the_model() -> None:
    overrides = [
        "model.family=transformer",
        "model.d_model=32",
        "model.heads=2",
        "model.enc_layers=2",
        "model.dec_layers=1",
        "model.attention.kind=bigbird",
        "model.attention.decoder_self=true",
        "model.attention.block_size=4",
        "model.attention.window_blocks=2",
        "model.attention.global_blocks=3",
        "model.attention.random_blocks=1",
        "model.attention.pattern_seed=11",
        "model.conv_kernel=5",
    ]
    model = build_model(config_from_dict({}, overrides).model, Vocabularies(20, 20, 0, 1, 2))
    mechanisms = [layer.self_attn.mechanism for layer in model.encoder.layers]
    mechanisms += [layer.self_attn.mechanism for layer in model.decoder_layers]
    assert all(isinstance(m, BigBirdSelfAttention) for m in mechanisms)
    assert [m.seed for m in mechanisms] == [11, 12, 13]  # encoder 0, 1, then the decoder layer
    first = mechanisms[0]
    sizes = (first.block_size, first.window_blocks, first.global_blocks, first.random_blocks)
    assert sizes == (4, 2, 3, 1)
    assert all(layer.conv.kernel == 5 for layer in model.encoder.layers)
    keys = ["model.family=transformer", "model.attention.memory_slots=3"]
    memory = config_from_dict({}, [*keys, "model.attention.memory_in_cross=true"])
    model = build_model(memory.model, Vocabularies(20, 20, 0, 1, 2))
    layer = model.decoder_layers[0]
    assert layer.self_attn.memory.slots == 3 and layer.cross_attn.memory.slots == 3
    assert model.encoder.layers[0].self_attn.memory.keys.shape == (4, 3, 64)  # (H, N, d_k)
    state = model.state_dict()
    rebuilt = build_model(memory.model, Vocabularies(20, 20, 0, 1, 2))
    rebuilt.load_state_dict(state)  # the memory vectors are saved and loaded with the weights
    assert torch.equal(
        rebuilt.encoder.layers[0].self_attn.memory.keys,
        state["encoder.layers.0.self_attn.memory.keys"],
    )


def test_self_attention_maps_label_the_memory_columns(tmp_path: Path) -> None:
    from helpers import untrained_checkpoint

    from attnseq.analysis.alignment_view import AlignmentViewer, merge_words

    checkpoint = untrained_checkpoint(
        tmp_path / "memory.pt",
        "model.family=transformer",
        "model.attention.memory_slots=2",
        "model.attention.memory_in_cross=true",
    )
    viewer = AlignmentViewer(checkpoint)
    encoder = viewer.attention("4 May 2001", "2001", kind="encoder")
    assert encoder.columns[-2:] == ["<m1>", "<m2>"] and len(encoder.rows) + 2 == len(
        encoder.columns
    )
    assert encoder.weights.shape[-1] == len(encoder.columns)
    words = merge_words(encoder)  # memory slots stay columns of their own
    assert words.columns[-2:] == ["<m1>", "<m2>"]
    cross = viewer.attention("4 May 2001", "2001", kind="cross")
    assert "<m1>" not in cross.columns and cross.weights.shape[-1] == len(cross.columns)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model",
    [
        ["model.attention.memory_slots=2", "model.attention.memory_in_cross=true"],
        ["model.conv_kernel=3"],
        [
            "model.attention.kind=bigbird",
            "model.attention.decoder_self=true",
            "model.attention.block_size=2",
        ],
    ],
)
def test_an_exact_resume_ends_with_the_same_weights(tmp_path: Path, model: list[str]) -> None:
    """5 updates, then resume to 8, against 8 in one go (dropout on: the RNG state matters)."""
    from helpers import tiny_config

    from attnseq.io.checkpoint import load_checkpoint
    from attnseq.training.run import run_training

    settings = ["model.family=transformer", "model.dropout=0.3", "trainer.validate_every=4"]
    settings += ["trainer.num_heatmaps=0", *model]
    straight, split = tmp_path / "straight", tmp_path / "split"
    run_training(tiny_config(*settings, "trainer.max_steps=8"), straight)
    run_training(tiny_config(*settings, "trainer.max_steps=5"), split)
    run_training(tiny_config(*settings, "trainer.max_steps=8", "resume=auto"), split)
    a = load_checkpoint(straight / "checkpoints" / "last.pt")["model"]
    b = load_checkpoint(split / "checkpoints" / "last.pt")["model"]
    assert any("memory" in name or "conv" in name for name in a) or "bigbird" in model[0]
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
