"""Fixtures of the Python API's tests: the loaded models, one whose work fails the test (for
calls that must be refused before it), and a run directory with the state of its training."""

from pathlib import Path

import pytest

import attnseq
from attnseq.api import model as api_model
from attnseq.api.model import Model


@pytest.fixture(scope="module")
def models(untrained_checkpoints: dict[str, Path]) -> dict[str, Model]:
    return {
        name: attnseq.load(path, "cpu", threads=1) for name, path in untrained_checkpoints.items()
    }


@pytest.fixture
def guarded_rnn(models: dict[str, Model], monkeypatch: pytest.MonkeyPatch) -> Model:
    """The RNN model, every computation of which fails the test: what is refused must be
    refused before it."""

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before the arguments were checked")

    model = models["rnn"]
    monkeypatch.setattr(model.translator, "nbest_lists", work)
    monkeypatch.setattr(api_model, "explain", work)
    monkeypatch.setattr(api_model, "align_sentences", work)
    return model


@pytest.fixture
def run(trained_rnn_checkpoint: Path) -> Path:
    """The run directory of conftest's trained_rnn_checkpoint (two updates): its checkpoints
    hold the state of training (optimizer, ...)."""
    return trained_rnn_checkpoint.parents[1]
