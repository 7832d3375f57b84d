"""Loading a trained model (attnseq/models/loading.py): a checkpoint that torch loads but attnseq
cannot use (its structure, config, weights or tokenizer state broken) is refused by eval,
translate, visualize-alignment and average in one line (exit 2) naming what is wrong, before
any work."""

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.io.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, load_checkpoint

runner = CliRunner()


@pytest.fixture(scope="module")
def good(rnn_checkpoint: Path) -> dict:
    return load_checkpoint(rnn_checkpoint)


def foreign(good: dict, case: str) -> dict:
    """A checkpoint that torch loads but attnseq cannot use, one defect per case."""
    marker = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION}
    if case == "only the marker":
        return marker
    payload = {**good}
    if case == "a string config":
        payload["config"] = "model: rnn"
    elif case == "an unknown config key":
        payload["config"] = {**good["config"], "modle": {}}
    elif case == "wrong-shape weights":
        model = dict(good["model"])
        name = next(iter(model))
        model[name] = torch.zeros(3, 3)
        payload["model"] = model
    elif case == "a missing tensor":
        payload["model"] = dict(list(good["model"].items())[1:])
    elif case == "a non-tensor weight":
        payload["model"] = {**good["model"], "extra": "not a tensor"}
    elif case == "a broken tokenizer state":
        payload["tokenizers"] = {"src": {"kind": "char"}, "tgt": {"kind": "char"}}
    return payload


CASES = {
    "only the marker": "its 'config' entry is missing",
    "a string config": "its 'config' entry is a str, not a dict",
    "an unknown config key": "its config is not a valid attnseq config",
    "wrong-shape weights": "its weights do not fit the model its config describes (wrong shape",
    "a missing tensor": "its weights do not fit the model its config describes (missing",
    "a non-tensor weight": "model entry 'extra' is not a tensor",
    "a broken tokenizer state": "its tokenizer state is broken",
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["eval", "translate", "visualize-alignment"])
def test_foreign_checkpoints_exit_2_in_one_line(
    good: dict, tmp_path: Path, case: str, command: str
) -> None:
    path = tmp_path / "foreign.pt"
    torch.save({**foreign(good, case), "format": CHECKPOINT_FORMAT}, path)
    args = {
        "eval": ["eval", str(path), "--out", str(tmp_path / "eval")],
        "translate": ["translate", str(path)],
        "visualize-alignment": ["visualize-alignment", str(path), "--src", "x", "--out", "a.png"],
    }[command]
    result = runner.invoke(app, args, input="3 March 1998\n")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and CASES[case] in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "eval").exists()


def test_average_refuses_a_foreign_checkpoint(good: dict, tmp_path: Path) -> None:
    path = tmp_path / "foreign.pt"
    torch.save(foreign(good, "a string config"), path)
    result = runner.invoke(app, ["average", str(path), "--out", str(tmp_path / "avg.pt")])
    assert result.exit_code == 2 and "its 'config' entry is a str" in result.stderr
    assert not (tmp_path / "avg.pt").exists()
