"""The alignment viewer (attnseq/analysis/alignment_view.py) through `attnseq visualize-alignment`,
on tiny trained checkpoints of both families."""

import numpy as np
import pytest
from typer.testing import CliRunner

from attnseq.analysis.alignment_view import AlignmentViewer, merge_words
from attnseq.cli.app import app


def invoke(*args: str):
    return CliRunner().invoke(app, ["visualize-alignment", *args])


@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_writes_a_figure_for_decoded_and_forced_targets(
    trained_checkpoints, family, tmp_path
) -> None:
    for extra in ([], ["--tgt", "1998-03-03"]):
        out = tmp_path / f"a{len(extra)}.png"
        result = invoke(
            str(trained_checkpoints[family]), "--src", "March 3rd, 1998", "--out", str(out), *extra
        )
        assert result.exit_code == 0, result.output
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_transformer_options(trained_checkpoints, tmp_path) -> None:
    ckpt = str(trained_checkpoints["transformer"])
    for args in (
        ["--all-heads"],
        ["--kind", "encoder", "--layer", "1", "--head", "2"],
        ["--kind", "decoder"],
        ["--words"],
    ):
        out = tmp_path / "t.svg"
        result = invoke(ckpt, "--src", "4 May 2001", "--out", str(out), *args)
        assert result.exit_code == 0, (args, result.output)
        assert out.read_text().lstrip().startswith("<?xml")


def test_forced_alignment_shapes_and_word_merging(trained_checkpoints) -> None:
    viewer = AlignmentViewer(trained_checkpoints["rnn"])
    attention = viewer.attention("4 May 2001", "2001-05-04")
    assert attention.weights.shape == (len("2001-05-04") + 1, len("4 May 2001"))
    np.testing.assert_allclose(attention.weights.sum(-1), 1.0, atol=1e-5)
    words = merge_words(attention)
    assert words.columns == ["4", "May", "2001"]
    assert words.weights.shape == (2, 3)  # "2001-05-04" is one word, "</s>" another
    # columns sum the pieces of a word; the weight on the two spaces belongs to no word
    spaces = attention.weights[:, [1, 5]].sum(-1)
    expected_rows = [(1.0 - spaces[:-1]).mean(), 1.0 - spaces[-1]]
    np.testing.assert_allclose(words.weights.sum(-1), expected_rows, atol=1e-5)


@pytest.mark.slow
def test_input_file_draws_one_figure_per_line(trained_checkpoints, tmp_path) -> None:
    lines = tmp_path / "in.txt"
    lines.write_text("March 3, 1998\n\n4 May 2001\n")
    result = invoke(
        str(trained_checkpoints["rnn"]),
        "--input",
        str(lines),
        "--out",
        str(tmp_path / "f"),
        "--tensorboard",
        str(tmp_path / "tb"),
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["line_0000.png", "line_0002.png"]
    assert any((tmp_path / "tb").iterdir())


@pytest.mark.slow
def test_kernel_attention_has_no_self_attention_map(tmp_path) -> None:
    """kind=linear never forms self-attention weights: visualize-alignment says why (exit 2);
    cross-attention, always full, is still drawn."""
    from helpers import untrained_checkpoint

    checkpoint = untrained_checkpoint(
        tmp_path / "linear.pt",
        "model.family=transformer",
        "model.attention.kind=linear",
        "model.attention.decoder_self=true",
    )
    for kind in ("encoder", "decoder"):
        result = invoke(str(checkpoint), "--src", "4 May 2001", "--kind", kind)
        assert result.exit_code == 2
        assert f"cannot draw {kind} self-attention" in result.output
        assert "model.attention.kind=linear" in result.output
    out = tmp_path / "cross.png"
    result = invoke(str(checkpoint), "--src", "4 May 2001", "--tgt", "2001", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "linformer"])
def test_sparse_and_low_rank_self_attention_maps(tmp_path, kind) -> None:
    from helpers import untrained_checkpoint

    checkpoint = untrained_checkpoint(
        tmp_path / f"{kind}.pt",
        "model.family=transformer",
        f"model.attention.kind={kind}",
        "model.attention.D=1",
        "model.attention.proj_dim=3",
        "data.max_src_len=64",
        "model.max_positions=64",
    )
    attention = AlignmentViewer(checkpoint).attention("4 May 2001", "2001", kind="encoder")
    weights = attention.weights  # (L, H, S, S)
    assert weights.shape[2:] == (len("4 May 2001"), len("4 May 2001"))
    if kind == "local":  # |i - j| <= 1: a tridiagonal map
        band = np.abs(np.subtract.outer(np.arange(10), np.arange(10))) <= 1
        assert np.all(weights[..., ~band] == 0)
    out = tmp_path / "encoder.png"
    result = invoke(str(checkpoint), "--src", "4 May 2001", "--kind", "encoder", "--out", str(out))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_maps_of_one_pass_equal_each_kind_drawn_alone(trained_checkpoints, family) -> None:
    viewer = AlignmentViewer(trained_checkpoints[family])
    maps, log_probs = viewer.maps("4 May 2001", "2001-05-04")
    kinds = ["cross", "encoder", "decoder"] if family == "transformer" else ["cross"]
    assert list(maps) == kinds
    for kind in kinds:
        alone = viewer.attention("4 May 2001", "2001-05-04", kind)
        np.testing.assert_array_equal(maps[kind].weights, alone.weights)
        assert (maps[kind].rows, maps[kind].columns) == (alone.rows, alone.columns)
    assert log_probs.shape == (len("2001-05-04") + 1,) and (log_probs < 0).all()
