"""What a run leaves in TensorBoard besides its curves (test metrics at the last step, the
hparams that set it apart, validation examples as text), readable heatmaps, and the figure
options of `attnseq visualize-alignment`."""

import re
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from helpers import tiny_config, untrained_checkpoint
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from typer.testing import CliRunner

from attnseq.analysis.figures import DPI, alignment_figure, readable_token
from attnseq.cli.app import app
from attnseq.config.schema import TrainConfig
from attnseq.training.run import run_training
from attnseq.training.train_log import run_hparams


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> EventAccumulator:
    run_dir = tmp_path_factory.mktemp("run")
    run_training(tiny_config("optim.lr=0.003", "trainer.max_steps=7"), run_dir)
    accumulator = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


def test_test_metrics_sit_at_the_last_training_step(events) -> None:
    for tag in ["test/bleu", "test/exact_match", "test/loss"]:
        assert [event.step for event in events.Scalars(tag)] == [7]
    assert events.Scalars("valid/loss")[-1].step == 7  # the final validation, same step


def test_hparams_hold_every_config_value_defaults_included(events) -> None:
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    keys = set(start.hparams)
    assert {"optim.lr", "trainer.max_steps", "model.hidden", "model.family", "n_params"} <= keys
    assert start.hparams["optim.lr"].number_value == pytest.approx(0.003)
    assert start.hparams["n_params"].number_value > 0
    # defaults too: a sweep that varies them has a value in every row
    assert start.hparams["seed"].number_value == 1
    assert start.hparams["trainer.max_nonfinite_steps"].number_value == 10
    assert start.hparams["model.attention.score"].string_value == "additive"


def test_run_hparams_are_the_same_keys_for_every_run() -> None:
    default = run_hparams(TrainConfig(), 1234)
    changed = run_hparams(tiny_config("optim.lr=0.01", "seed=3"), 99)
    assert set(default) == set(changed)
    assert default["n_params"] == 1234 and changed["seed"] == 3 and default["seed"] == 1
    assert default["trainer.max_steps"] == "None"
    assert "resume" not in default


def test_text_tab_shows_the_same_validation_examples_each_time(events) -> None:
    texts = events.Tensors("valid/examples/text_summary")
    assert [event.step for event in texts] == [3, 6, 7]
    tables = [event.tensor_proto.string_val[0].decode() for event in texts]
    shown = []
    for table in tables:
        assert table.startswith("| # | source | hypothesis | reference |")
        rows = table.splitlines()[2:]
        assert len(rows) == 4
        shown.append([(int(row.split("|")[1]), row.split("|")[2]) for row in rows])
    assert [index for index, _ in shown[0]] == [0, 1, 2, 3]
    assert shown[0] == shown[1] == shown[2]  # the same sources at every validation


def test_heatmap_has_a_title_horizontal_short_ticks_and_readable_fonts() -> None:
    src = [*"ab c", "▁longword"]
    tgt = [*"xy", "</s>"]
    figure = alignment_figure(np.full((3, 5), 0.2), src, tgt, "ab c longword → xy")
    ax = figure.axes[0]
    assert ax.get_title() == "ab c longword → xy"
    rotations = {label.get_text(): label.get_rotation() for label in ax.get_xticklabels()}
    assert rotations == {"a": 0, "b": 0, "␣": 0, "c": 0, "_longword": 90}
    for label in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
        assert label.get_fontsize() * min(DPI, 100) / 72 >= 10  # pixels in saved and TB images
    assert readable_token(" ") == "␣"


def test_long_titles_wrap_to_the_figure() -> None:
    title = "word " * 80 + "→ out"
    figure = alignment_figure(np.full((2, 2), 0.5), ["a", "b"], ["c", "</s>"], title)
    assert 2 <= len(figure.axes[0].get_title().splitlines()) <= 3


def test_visualize_alignment_figure_options(tmp_path: Path) -> None:
    checkpoint = untrained_checkpoint(tmp_path / "model.pt")
    out = tmp_path / "a.png"
    args = ["visualize-alignment", str(checkpoint), "--src", "March 3, 1998", "--out", str(out)]
    style = ["--figsize", "8,5", "--fontsize", "13", "--cmap", "Blues"]
    result = CliRunner().invoke(app, [*args, *style])
    assert result.exit_code == 0, result.output
    assert re.search(r"^hypothesis: .*$", result.stdout, re.MULTILINE)
    height, width = matplotlib.image.imread(out).shape[:2]
    assert (width, height) == (8 * DPI, 5 * DPI)
    forced = CliRunner().invoke(app, [*args, "--tgt", "1998-03-03"])
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
    args = ["visualize-alignment", str(tmp_path / "missing.pt"), "--src", "a", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *option])
    assert result.exit_code == 2
    assert message in result.stderr
    assert not out.exists()
