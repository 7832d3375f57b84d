"""Training records for batch jobs (attnseq/training/train_log.py): the periodic training lines in
train.log and a redirected stdout, validation and test lines with sentences/s, what a run leaves
in TensorBoard, and the summary it prints."""

import logging
import re
import subprocess
import sys
from pathlib import Path

import helpers
import numpy as np
import pytest
import torch
from helpers import tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from attnseq.cli.app import app
from attnseq.config.schema import TrainConfig
from attnseq.training.run import run_training
from attnseq.training.train_log import example_figures, log_interval, run_hparams

TINY = [
    "data=reverse",
    *helpers.TINY,
    "trainer.max_steps=6",
    "trainer.log_every=2",
    "trainer.validate_every=3",
]

INTERVAL = re.compile(
    r"step (\d+)/(\d+)  epoch [\d.]+  loss [\d.]+  nll [\d.]+  ppl [\d.]+  lr [\d.e+-]+  "
    r"[\d,]+ tgt tok/s  grad norm [\d.e+-]+  elapsed \d+:\d\d:\d\d  ETA (\d+:\d\d:\d\d|-)"
)


def _git_repository_with_a_change(folder: Path) -> str:
    """A git repository in `folder` with one commit and a tracked file changed since; its
    commit hash."""
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
    (folder / "notes.txt").write_text("one\n")
    for args in (["init", "-q"], ["add", "notes.txt"], [*identity, "commit", "-qm", "notes"]):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)
    (folder / "notes.txt").write_text("two\n")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True)
    return head.stdout.strip()


@pytest.mark.slow
def test_redirected_train_writes_interval_lines_to_stdout_and_train_log(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    commit = _git_repository_with_a_change(tmp_path)
    with (tmp_path / "log.txt").open("w") as stdout:  # `attnseq train ... > log.txt`
        result = subprocess.run(
            [sys.executable, "-m", "attnseq", "train", *TINY, f"hydra.run.dir={run_dir}"],
            cwd=tmp_path,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stderr  # no bar, no terminal codes where there is no terminal
    for text in [(tmp_path / "log.txt").read_text(), (run_dir / "train.log").read_text()]:
        matches = INTERVAL.findall(text)
        assert [int(step) for step, _, _ in matches] == [2, 4, 6]
        assert {total for _, total, _ in matches} == {"6"}
        assert matches[-1][2] == "0:00:00"  # the budget is spent at the last step
        assert len(re.findall(r"step [36]: valid/bleu=.* valid/exact_match=", text)) == 2
        assert len(re.findall(r"valid: decoded 10 sentences in [\d.]+ s \([\d.,]+ sen", text)) == 2
        assert re.search(r"test: decoded 10 sentences in [\d.]+ s \([\d.,]+ sentences/s\)", text)
    # train.log opens with what a bug report needs, the resolved config included
    header = (run_dir / "train.log").read_text().splitlines()
    messages = [line.split(" - ", 1)[1] for line in header[:4]]
    assert re.fullmatch(
        rf"attnseq \S+, torch {re.escape(torch.__version__)}, Python .*", messages[0]
    )
    assert messages[1].startswith("command: ") and messages[1].endswith(
        f"-m attnseq train {' '.join(TINY)} hydra.run.dir={run_dir}"
    )
    assert messages[2] == f"working directory: {tmp_path} (git commit {commit}, dirty)"
    assert messages[3] == "resolved config:"
    assert header[4:7] == ["seed: 1", "data:", "  name: reverse"]
    assert "  max_steps: 6" in header
    assert "resolved config:" not in (tmp_path / "log.txt").read_text()  # train.log only


@pytest.mark.slow
def test_with_label_smoothing_the_log_line_shows_the_nll_and_its_perplexity(
    tmp_path: Path, caplog
) -> None:
    """train/loss is the smoothed objective; train/nll the plain negative log-likelihood per
    target token and train/ppl = exp(train/nll), as valid/ppl = exp(valid/loss): in the log
    line, TensorBoard and metrics.json."""
    import json
    import math

    cfg = tiny_config("optim.label_smoothing=0.1", "trainer.max_steps=4", "trainer.log_every=2")
    with caplog.at_level(logging.INFO, logger="attnseq"):
        run_training(cfg, tmp_path, summary=False)
    lines = re.findall(r"loss ([\d.]+)  nll ([\d.]+)  ppl ([\d.]+)", caplog.text)
    assert len(lines) == 2
    for loss, nll, ppl in ((float(x) for x in line) for line in lines):
        assert nll < loss  # smoothing adds eps * the cross entropy to the uniform
        assert ppl == pytest.approx(math.exp(nll), rel=1e-3)  # of the printed digits
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    scalars = {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    for nll, ppl in zip(scalars["train/nll"], scalars["train/ppl"], strict=True):
        assert ppl == pytest.approx(math.exp(nll), rel=1e-6)
    for loss, ppl in zip(scalars["valid/loss"], scalars["valid/ppl"], strict=True):
        assert ppl == pytest.approx(math.exp(loss), rel=1e-6)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["train/ppl"] == pytest.approx(math.exp(metrics["train/nll"]))
    assert metrics["train/nll"] < metrics["train/loss"]
    assert metrics["train/loss"] == pytest.approx(scalars["train/loss"][-1], rel=1e-6)


@pytest.mark.slow
def test_without_smoothing_the_nll_is_the_loss(tmp_path: Path) -> None:
    run_training(tiny_config("trainer.max_steps=2", "trainer.log_every=1"), tmp_path)
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    losses = [event.value for event in events.Scalars("train/loss")]
    assert [event.value for event in events.Scalars("train/nll")] == pytest.approx(losses)


@pytest.mark.parametrize(("total", "every"), [(150, 7), (40, 2), (10, 1), (100_000, 100)])
def test_log_every_auto_gives_about_twenty_points(total: int, every: int) -> None:
    assert log_interval("auto", total) == every
    assert log_interval(5, total) == 5


@pytest.mark.slow
def test_a_run_logs_its_last_updates_where_the_interval_does_not_end(tmp_path: Path) -> None:
    """`trainer.log_every=auto` over 45 updates: every 2, and the 45th closes the curve."""
    overrides = ["trainer.max_steps=45", "trainer.max_epochs=100", "trainer.validate_every=45"]
    overrides.append("trainer.log_every=auto")
    run_training(tiny_config(*overrides), tmp_path)
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    steps = [event.step for event in events.Scalars("train/nll")]
    assert steps == [*range(2, 45, 2), 45]


@pytest.mark.slow
def test_translate_and_eval_end_with_sentences_per_second_on_stderr(
    rnn_checkpoint: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    source = tmp_path / "in.txt"
    source.write_text("March 3, 1998\n\n12/05/2001\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(
        app, ["translate", str(rnn_checkpoint), "-i", str(source), "--beam", "2", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 3  # the outputs alone on stdout
    assert re.fullmatch(
        r"translated 3 sentences in [\d.]+ s \([\d.,]+ sentences/s\)\n", result.stderr
    )
    result = runner.invoke(
        app, ["eval", str(rnn_checkpoint), "--out", str(tmp_path / "eval"), "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert re.search(
        r"test: decoded 20 sentences in [\d.]+ s \([\d.,]+ sentences/s\)", result.stderr
    )


# ------------------------------------------------------------
# What a run leaves in TensorBoard besides its curves (test metrics at the last step, the
# hparams that set it apart, validation examples as text).


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> EventAccumulator:
    run_dir = tmp_path_factory.mktemp("run")
    run_training(tiny_config("optim.lr=0.003", "trainer.max_steps=7"), run_dir)
    accumulator = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_validation_shares_one_colour_scale_unless_asked_per_figure() -> None:
    """`trainer.heatmap_scale=shared`: every figure of an example (each layer, the mean) spans
    the limits given (those of all of the step's maps); per_figure: each its own."""
    weights = np.zeros((2, 2, 2, 3))  # (L, H, T, S)
    weights[0, ..., 0] = 0.9  # layer 1 sure, layer 2 spread
    weights[0, ..., 1:] = 0.05
    weights[1] = 1 / 3
    src, tgt = ["a", "b", "c"], ["x", "</s>"]
    shared = example_figures(weights, src, tgt, "a b c → x", limits=(0.0, 0.9))
    assert list(shared) == ["/layer_1", "/layer_2", "/last_layer_mean"]
    for figure in shared.values():
        assert figure.axes[0].images[0].get_clim() == pytest.approx((0.0, 0.9))
    own = example_figures(weights, src, tgt, "a b c → x")
    assert own["/layer_2"].axes[0].images[0].get_clim() == pytest.approx((0.0, 1 / 3))
    assert own["/layer_1"].axes[0].images[0].get_clim() == pytest.approx((0.0, 0.9))


def test_the_summary_aligns_its_values_whatever_the_names(tmp_path: Path, capsys) -> None:
    from attnseq.training.run import _print_summary

    metrics = {"test/bleu": 12.5, "test/attention/entropy_of_a_long_named_measure": 0.25}
    _print_summary(tiny_config(), tmp_path, metrics)
    rows = capsys.readouterr().out.splitlines()[1:4]
    values = [row.rsplit(" ", 1) for row in rows if "signature" not in row]
    assert len({len(name) for name, _ in values}) == 1, rows  # one column edge for all
    assert [value for _, value in values] == ["0.2500", "12.5000"]
