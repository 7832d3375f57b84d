"""Checkpoints: round trip, atomic replacement, and refusal of bad or malicious files."""

import pickle
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.errors import UserError
from attnseq.io.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    load_checkpoint,
    save_checkpoint,
    training_state_in,
)


def test_round_trip(tmp_path: Path) -> None:
    payload = {
        "model": {"w": torch.arange(6.0).view(2, 3)},
        "progress": {"step": 7},
        "tokenizers": {"src": {"kind": "char", "tokens": ["a", "b"]}},
        "rng": {"torch": torch.get_rng_state()},
    }
    save_checkpoint(tmp_path / "c.pt", payload)
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(loaded["model"]["w"], payload["model"]["w"])
    assert loaded["progress"] == {"step": 7}
    assert loaded["tokenizers"]["src"]["tokens"] == ["a", "b"]
    assert list(tmp_path.iterdir()) == [tmp_path / "c.pt"]  # no temporary file left behind


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"value": 1})

    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_checkpoint(path, {"value": Unsaveable()})
    assert load_checkpoint(path)["value"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_missing_truncated_and_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    save_checkpoint(tmp_path / "full.pt", {"model": {"w": torch.zeros(1000)}})
    data = (tmp_path / "full.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated"):
        load_checkpoint(tmp_path / "cut.pt")
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="not an attnseq checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(UserError):
        load_checkpoint(tmp_path / "text.pt")


class _Payload:
    """Unpickling this object would create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    torch.save(
        {"format": "attnseq-checkpoint", "version": 1, "x": _Payload(marker)}, tmp_path / "evil.pt"
    )
    with pytest.raises(UserError, match="not an attnseq checkpoint .* could run code"):
        load_checkpoint(tmp_path / "evil.pt")
    assert not marker.exists()
    (tmp_path / "evil_raw.pt").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(UserError):
        load_checkpoint(tmp_path / "evil_raw.pt")
    assert not marker.exists()


# ------------------------------------------------------------
# Loadable but foreign checkpoints: eval, translate and visualize-alignment refuse each in one
# line (exit 2) naming what is wrong, before any work.

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


def test_the_training_state_a_file_holds_is_read_from_its_content(tmp_path: Path) -> None:
    """What `Model.save` and `attnseq average` will not write over: the entries of training
    state in a file, whatever it is named; nothing for a model, a foreign or broken file, or
    no file."""
    save_checkpoint(tmp_path / "model.txt", {"model": {"w": torch.zeros(3)}, "optimizer": {}})
    save_checkpoint(tmp_path / "last.pt", {"model": {"w": torch.zeros(3)}, "config": {}})
    torch.save({"progress": {"step": 3}, "rng": {}}, tmp_path / "other.pt")
    with (tmp_path / "old.pt").open("wb") as handle:  # an older torch's pickle: no zip to map
        torch.save({"scheduler": {}}, handle, _use_new_zipfile_serialization=False)
    (tmp_path / "text.pt").write_text("optimizer\n")
    data = (tmp_path / "model.txt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    assert training_state_in(tmp_path / "model.txt") == ["optimizer"]
    assert training_state_in(tmp_path / "other.pt") == ["progress", "rng"]
    assert training_state_in(tmp_path / "old.pt") == ["scheduler"]
    for nothing in ("last.pt", "text.pt", "cut.pt", "missing.pt", "."):
        assert training_state_in(tmp_path / nothing) == [], nothing
