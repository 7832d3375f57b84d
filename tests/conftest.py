"""Shared test settings: deterministic, single-threaded torch, markers for slow/gpu tests, and the
location of the shared real corpora."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# Tiny models run fastest on one thread, and a busy machine does not slow them 100x.
torch.set_num_threads(1)

SHARED_DATA = Path(
    os.environ.get("ATTNSEQ_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)


@pytest.fixture(autouse=True, scope="session")
def absl_writes_to_the_process_stderr() -> None:
    """absl's logging handler (absl comes with tensorboard) closes the stream it writes to when
    logging is configured again (Hydra does, in every in-process `attnseq train`), unless that
    stream is sys.stderr at that moment. Under typer's CliRunner sys.stderr is another object,
    so the handler would close pytest's capture of stderr: it gets the process's own stderr."""
    import sys

    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


@pytest.fixture(autouse=True)
def no_handlers_on_closed_streams() -> Iterator[None]:
    """An in-process `attnseq train` lets Hydra configure logging: console handlers on the
    root logger that write to typer's CliRunner streams, which are closed once the command
    returns. A later test's records would reach them: they go after each test."""
    import logging

    yield
    for logger in (logging.getLogger(), logging.getLogger("attnseq")):
        for handler in list(logger.handlers):
            if getattr(getattr(handler, "stream", None), "closed", False):
                logger.removeHandler(handler)


# Parallel test workers (pytest-xdist's `-n auto`): one per core, at most this many. Every
# worker imports torch and trains tiny models; beyond a few they mostly wait on each other.
MAX_TEST_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(MAX_TEST_WORKERS, os.cpu_count() or 1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # ATTNSEQ_TEST_DEVICE=cpu runs the GPU suite's own code on the CPU (tests/gpu/conftest.py)
    if torch.cuda.is_available() or os.environ.get("ATTNSEQ_TEST_DEVICE") == "cpu":
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not a parameter that is named gpu
            item.add_marker(skip_gpu)


@pytest.fixture
def shared_data() -> Path:
    """../shared/data (or $ATTNSEQ_DATA); skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA} (set ATTNSEQ_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="module")
def one_intra_op_thread() -> Iterator[None]:
    """One intra-op thread for a module of tiny-tensor tests (`pytestmark =
    pytest.mark.usefixtures("one_intra_op_thread")`), restored afterwards: tiny tensors gain
    nothing from intra-op threads, and OpenMP spin-waiting makes them orders of magnitude slower
    when another process competes for the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


API_TRANSFORMER = ("model.family=transformer", "model.dec_layers=2", "model.heads=2")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An untrained RNN as a run directory's best.pt and an untrained transformer file."""
    from helpers import untrained_checkpoint

    folder = tmp_path_factory.mktemp("api")
    run = folder / "run" / "checkpoints"
    run.mkdir(parents=True)
    return {
        "rnn": untrained_checkpoint(run / "best.pt"),
        "transformer": untrained_checkpoint(folder / "t.pt", *API_TRANSFORMER),
    }
