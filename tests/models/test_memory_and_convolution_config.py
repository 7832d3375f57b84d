"""The config keys of BigBird, persistent memory and the convolution sublayer: each reaches the
built model, and invalid combinations end `attnseq train` with one line and exit status 2."""

from pathlib import Path

import pytest
import torch
from helpers import assert_refused, train_in_process

from attnseq.attention.bigbird import BigBirdSelfAttention
from attnseq.config.conversion import config_from_dict
from attnseq.models import Vocabularies, build_model


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model.attention.memory_slots=4"], "model.attention.memory_slots=4 is a transformer"),
        (["model.conv_kernel=3"], "model.conv_kernel=3 is a transformer option"),
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
    ],  # fmt: skip
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
