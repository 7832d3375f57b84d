"""Checkpoints: round trip, atomic replacement, and refusal of bad or malicious files (files that
load but attnseq cannot use: tests/models/test_loading.py)."""

import pickle
from pathlib import Path

import pytest
import torch

from attnseq.errors import UserError
from attnseq.io.checkpoint import (
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
