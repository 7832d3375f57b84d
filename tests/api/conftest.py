"""Fixtures of the Python API's tests: the loaded models, a run directory with the state of its
training, and a guard that fails a test when a refused call starts its work."""

from collections.abc import Callable
from pathlib import Path

import pytest

import attnseq
from attnseq.api import model as api_model
from attnseq.api.model import Model


@pytest.fixture(scope="module")
def models(checkpoints: dict[str, Path]) -> dict[str, Model]:
    return {name: attnseq.load(path, "cpu", threads=1) for name, path in checkpoints.items()}


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> Callable[[Model], None]:
    """Make every computation of a model fail the test: what is refused must be refused
    before it."""

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before the arguments were checked")

    def forbid(model: Model) -> None:
        monkeypatch.setattr(model.translator, "nbest_lists", work)
        monkeypatch.setattr(api_model, "explain", work)
        monkeypatch.setattr(api_model, "align_sentences", work)

    return forbid


@pytest.fixture
def run(trained_rnn_checkpoint: Path) -> Path:
    """The run directory of conftest's trained_rnn_checkpoint (two updates): its checkpoints
    hold the state of training (optimizer, ...)."""
    return trained_rnn_checkpoint.parents[1]
