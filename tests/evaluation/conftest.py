"""Fixtures of the Python API's tests."""

from pathlib import Path

import pytest
from helpers import untrained_checkpoint

TRANSFORMER = ("model.family=transformer", "model.dec_layers=2", "model.heads=2")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An untrained RNN as a run directory's best.pt and an untrained transformer file."""
    folder = tmp_path_factory.mktemp("api")
    run = folder / "run" / "checkpoints"
    run.mkdir(parents=True)
    return {
        "rnn": untrained_checkpoint(run / "best.pt"),
        "transformer": untrained_checkpoint(folder / "t.pt", *TRANSFORMER),
    }
