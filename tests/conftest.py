"""Shared test settings: deterministic, single-threaded torch, markers for slow/gpu tests, the
location of the shared real corpora, and tiny checkpoints of each model family built once."""

import os
import random
from collections.abc import Callable, Iterator
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


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """attnseq's data cache (ATTNSEQ_CACHE) in the test's own folder, out of the user's."""
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def ctranslate2():
    """The ctranslate2 module; skips the test where it is not installed."""
    return pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (attnseq[ct2])")


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


# ---------------------------------------------------- tiny checkpoints, built once per run
# Checkpoints that many modules read: untrained ones of helpers.tiny_config (each family's own
# keys only) and short trained runs. Each is built once per test run, by whichever worker asks
# first (helpers.built_once), as a run directory's checkpoints/best.pt (its run directory:
# `.parents[1]`). Tests only read them: a command that writes beside its checkpoint (`attnseq
# eval` without an output folder writes RUN/eval/) gets a copy, or the test builds its own.
# Each run directory is checked unchanged when the session ends.

# Two decoder layers: a layer other than the last one, for the options that choose a layer.
TRANSFORMER = ("model.family=transformer", "model.dec_layers=2")
# Two updates of one thread: a checkpoint that holds the state of its training.
TRAINED = ("trainer.max_steps=2", "trainer.validate_every=2", "trainer.threads=1")


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path relative to `folder`."""
    files = (path for path in folder.rglob("*") if path.is_file())
    return {str(path.relative_to(folder)): path.read_bytes() for path in files}


def _shared_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Iterator[Path]:
    """checkpoints/best.pt of the run directory `build(folder)` makes once per test run, with
    the random number generators as they were: a test sees the same random state whether or
    not it is the one that builds. Fails at the session's end if a test changed the folder."""
    from helpers import built_once

    def build_keeping_rng(folder: Path) -> None:
        state = random.getstate()
        with torch.random.fork_rng(devices=[]):
            build(folder)
        random.setstate(state)

    folder = built_once(tmp_path_factory, name, build_keeping_rng)
    before = _contents(folder)
    yield folder / "checkpoints" / "best.pt"
    assert _contents(folder) == before, f"a test wrote into the shared run directory {folder}"


def _untrained(*overrides: str) -> Callable[[Path], None]:
    from helpers import untrained_checkpoint

    def build(folder: Path) -> None:
        (folder / "checkpoints").mkdir()
        untrained_checkpoint(folder / "checkpoints" / "best.pt", *overrides)

    return build


def _trained(*overrides: str) -> Callable[[Path], None]:
    from helpers import tiny_config, train_quietly

    def build(folder: Path) -> None:
        train_quietly(tiny_config(*overrides, *TRAINED), folder)

    return build


@pytest.fixture(scope="session")
def rnn_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An untrained tiny GRU + Bahdanau model of the default task (dates): `tiny_config()`."""
    yield from _shared_run(tmp_path_factory, "rnn-checkpoint", _untrained())


@pytest.fixture(scope="session")
def transformer_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An untrained tiny transformer of the default task with two decoder layers."""
    yield from _shared_run(tmp_path_factory, "transformer-checkpoint", _untrained(*TRANSFORMER))


@pytest.fixture(scope="session")
def trained_rnn_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The best checkpoint of a tiny GRU + Bahdanau model trained for two updates on the
    default task; its run directory (`.parents[1]`) holds last.pt, metrics.json, ..."""
    yield from _shared_run(tmp_path_factory, "trained-rnn", _trained())


@pytest.fixture(scope="session")
def trained_transformer_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The best checkpoint of a tiny transformer (one layer each side) trained for two updates
    on the default task."""
    yield from _shared_run(
        tmp_path_factory, "trained-transformer", _trained("model.family=transformer")
    )


@pytest.fixture(scope="session")
def eight_head_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model.pt: an untrained tiny transformer of 2 encoder layers and 1 decoder layer, 2 heads
    each (8 heads to measure and prune), its task with 12 validation and 6 test pairs."""
    from helpers import untrained_checkpoint

    path = tmp_path_factory.mktemp("heads") / "model.pt"
    overrides = ("model.family=transformer", "model.enc_layers=2", "model.dec_layers=1")
    return untrained_checkpoint(path, *overrides, "data.valid_size=12", "data.test_size=6")


@pytest.fixture(scope="session")
def untrained_checkpoints(rnn_checkpoint: Path, transformer_checkpoint: Path) -> dict[str, Path]:
    """The untrained checkpoint of each family, by family name."""
    return {"rnn": rnn_checkpoint, "transformer": transformer_checkpoint}


@pytest.fixture(scope="session")
def trained_checkpoints(
    trained_rnn_checkpoint: Path, trained_transformer_checkpoint: Path
) -> dict[str, Path]:
    """The checkpoint of each family trained two updates, by family name."""
    return {"rnn": trained_rnn_checkpoint, "transformer": trained_transformer_checkpoint}


@pytest.fixture(scope="session")
def marian_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random-weight Hugging Face Marian model folders, one per shape of
    tests/marian_stand_ins.py, built once per test run (tests only read them); skips without
    transformers or the shared corpora its tokenizers are trained on."""
    pytest.importorskip("transformers", reason="the Marian stand-ins are built with transformers")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA} (set ATTNSEQ_DATA)")
    from helpers import built_once
    from marian_stand_ins import SHAPES, marian_folder

    def builder(name: str) -> Callable[[Path], None]:
        return lambda folder: marian_folder(folder, SHARED_DATA, name)

    return {name: built_once(tmp_path_factory, f"marian-{name}", builder(name)) for name in SHAPES}


@pytest.fixture(scope="session")
def bart_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random-weight Hugging Face BART model folders, one per shape of tests/bart_stand_ins.py,
    built once per test run (tests only read them); skips without transformers or the shared
    corpora its tokenizer is trained on."""
    pytest.importorskip("transformers", reason="the BART stand-ins are built with transformers")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA} (set ATTNSEQ_DATA)")
    from bart_stand_ins import SHAPES, bart_folder
    from helpers import built_once

    def builder(name: str) -> Callable[[Path], None]:
        return lambda folder: bart_folder(folder, SHARED_DATA, name)

    return {name: built_once(tmp_path_factory, f"bart-{name}", builder(name)) for name in SHAPES}


@pytest.fixture
def fake_sweep(tmp_path: Path) -> Path:
    """A hand-made multirun folder of four jobs, one unfinished (tests/sweep_folders.py)."""
    from sweep_folders import write_hand_made

    return write_hand_made(tmp_path)


@pytest.fixture
def seeded_sweep(tmp_path: Path) -> Path:
    """A hand-made multirun folder of two models by three seeds (tests/sweep_folders.py)."""
    from sweep_folders import write_seeded

    return write_seeded(tmp_path)


@pytest.fixture(scope="session")
def multilingual_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Random-weight Hugging Face M2M100, NLLB and mBART-50 model folders, one per shape of
    tests/multilingual_stand_ins.py, built once per test run (tests only read them); skips
    without transformers or the shared corpora their tokenizers are trained on."""
    pytest.importorskip("transformers", reason="the stand-ins are built with transformers")
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA} (set ATTNSEQ_DATA)")
    from helpers import built_once
    from multilingual_stand_ins import SHAPES, multilingual_folder

    def builder(name: str) -> Callable[[Path], None]:
        return lambda folder: multilingual_folder(folder, SHARED_DATA, name)

    return {name: built_once(tmp_path_factory, f"multi-{name}", builder(name)) for name in SHAPES}
