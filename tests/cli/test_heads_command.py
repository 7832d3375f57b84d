"""`attnseq heads` (attnseq/cli/heads_command.py): its tables, files and pruning message, layers
and heads counted from 1, and exit status 2 on mistakes."""

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from attnseq.analysis.head_importance import importance_figure
from attnseq.cli.app import app
from attnseq.cli.heads_runner import HeadsRequest, run_heads
from attnseq.models.loading import load_trained_model


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--prune", "8"], "K must be below"),
        (["--prune", "1.5"], "fraction must be in (0, 1)"),
        (["--prune", "0.0"], "fraction must be in (0, 1)"),
        (["--split", "dev"], "is not a split of this dataset"),
        (["--prune", "2"], "--prune and --out go together"),
        (["--by", "size"], "--by must be one of"),
        (["--max-batches", "0"], "--max-batches must be at least 1"),
        # every split of a generated task is made: 2**31 training pairs would take hours
        (["data.train_size=2147483648"], "the generated data does not fit"),
    ],
)
def test_heads_command_exits_2_on_mistakes(eight_head_checkpoint, tmp_path, arguments, message):
    if "--prune" in arguments and arguments[1] != "2":
        arguments = [*arguments, "--out", str(tmp_path / "x.pt")]
    result = CliRunner().invoke(app, ["heads", str(eight_head_checkpoint), *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.slow
def test_heads_command_needs_a_transformer(rnn_checkpoint):
    result = CliRunner().invoke(app, ["heads", str(rnn_checkpoint)])
    assert result.exit_code == 2
    assert "heads needs a transformer" in result.output


@pytest.mark.slow
def test_heads_command_prints_tables_and_writes_files(eight_head_checkpoint, tmp_path):
    options = ["--report-dir", str(tmp_path), "--prune", "1", "--out", str(tmp_path / "p.pt")]
    result = CliRunner().invoke(app, ["heads", str(eight_head_checkpoint), *options])
    assert result.exit_code == 0, result.output
    assert "encoder self-attention" in result.output and "decoder cross-attention" in result.output
    assert (tmp_path / "model.valid.json").exists() and (tmp_path / "model.valid.png").exists()
    assert "pruned 1 heads" in result.output


@pytest.mark.slow
def test_a_checkpoint_name_that_is_not_utf8_titles_the_figure(eight_head_checkpoint, tmp_path):
    """A name's bytes that are not UTF-8 (lone surrogates in Python) made matplotlib refuse the
    figure's title with a TypeError; the title shows them as U+FFFD."""
    latin1 = os.fsdecode(bytes(tmp_path) + b"/caf\xe9.pt")
    shutil.copyfile(eight_head_checkpoint, latin1)
    result = CliRunner().invoke(app, ["heads", latin1, "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert os.path.isfile(os.fsdecode(bytes(tmp_path) + b"/r/caf\xe9.valid.png"))


@pytest.mark.slow
def test_tables_figure_message_and_record_count_layers_and_heads_from_1(
    eight_head_checkpoint, tmp_path
):
    out = tmp_path / "pruned.pt"
    pruning = ["--prune", "4", "--by", "ablation", "--out", str(out)]
    report = ["--report-dir", str(tmp_path / "report"), "--device", "cpu"]
    result = CliRunner().invoke(app, ["heads", str(eight_head_checkpoint), *pruning, *report])
    assert result.exit_code == 0, result.output
    assert "head 1" in result.output and "head 2" in result.output
    assert "head 0" not in result.output
    message = next(line for line in result.output.splitlines() if line.startswith("pruned 4"))
    assert "L0" not in message and "h0" not in message and "encoder_self L2 h" in message
    layers = [
        line.split("│")[1].strip()
        for line in result.output.splitlines()
        if "/" in line and line.count("│") > 2
    ]
    assert "0" not in layers and {"1", "2"} <= set(layers)
    heads = load_trained_model(out).payload["head_pruning"]["heads"]
    assert min(min(layer, head) for _, layer, head in heads) == 1
    assert {layer for kind, layer, _ in heads if kind == "encoder_self"} == {1, 2}

    report = json.loads(next((tmp_path / "report").glob("*.json")).read_text())
    assert "p + 1" in report["numbering"]
    measured = run_heads(
        HeadsRequest(eight_head_checkpoint, report_dir=tmp_path / "again", device="cpu")
    )
    axis = importance_figure(measured.importance, "t").axes[0]  # encoder: 2 layers x 2 heads
    assert [label.get_text() for label in axis.get_xticklabels()] == ["1", "2"]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["1", "2"]
