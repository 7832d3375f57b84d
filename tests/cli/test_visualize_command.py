"""`attnseq visualize-alignment` (attnseq/cli/visualize_command.py): its figure options, and its
refusals: one message and exit status 2 (figure options before a checkpoint is read)."""

import os
import re
from pathlib import Path

import matplotlib.image
import pytest
from helpers import invoke

from attnseq.analysis.figures import DPI


def visualize(*args: str):
    return invoke("visualize-alignment", *args)


@pytest.mark.slow
def test_visualize_alignment_figure_options(rnn_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "a.png"
    args = [str(rnn_checkpoint), "--src", "March 3, 1998", "--out", str(out)]
    style = ["--figsize", "8,5", "--fontsize", "13", "--cmap", "Blues"]
    result = visualize(*args, *style)
    assert result.exit_code == 0, result.output
    assert re.search(r"^hypothesis: .*$", result.stdout, re.MULTILINE)
    height, width = matplotlib.image.imread(out).shape[:2]
    assert (width, height) == (8 * DPI, 5 * DPI)
    forced = visualize(*args, "--tgt", "1998-03-03")
    assert "forced target: 1998-03-03" in forced.stdout


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--cmap", "nope"], "unknown colormap 'nope'; matplotlib has e.g. viridis"),
        (["--figsize", "8"], "--figsize must be W,H"),
        (["--figsize", "a,b"], "--figsize must be W,H"),
        (["--fontsize", "0"], "--fontsize must be between"),
    ],
)
def test_visualize_alignment_rejects_bad_figure_options(option, message, tmp_path) -> None:
    out = tmp_path / "a.png"
    # checked before the checkpoint is read: a missing one does not matter
    args = [str(tmp_path / "missing.pt"), "--src", "a", "--out", str(out)]
    result = visualize(*args, *option)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--src", "   "], "empty source"),
        ([], "exactly one of"),
        (["--src", "x", "--kind", "encoder"], "needs a transformer"),
        (["--src", "x", "--kind", "nope"], "--kind must be"),
    ],
)
def test_user_errors_exit_2(trained_checkpoints, args, message) -> None:
    result = visualize(str(trained_checkpoints["rnn"]), *args)
    assert result.exit_code == 2
    assert message in result.output


def test_a_tensorboard_folder_that_is_not_utf8_is_refused_first(
    trained_checkpoints, tmp_path
) -> None:
    """TensorBoard's writer encodes its folder as UTF-8: a name with bytes that are not (argv
    gives them as lone surrogates) raised UnicodeEncodeError once the figure was drawn."""
    folder = os.fsdecode(bytes(tmp_path) + b"/tb\xff")
    result = visualize(str(trained_checkpoints["rnn"]), "--src", "x", "--tensorboard", folder)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "TensorBoard writes only into folders whose paths are UTF-8" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_layer_out_of_range(trained_checkpoints) -> None:
    result = visualize(str(trained_checkpoints["transformer"]), "--src", "x", "--layer", "9")
    assert result.exit_code == 2 and "--layer must be in 1..1" in result.output
