"""The encoding workers: a dead worker is one line naming what to lower; the workers die with
their killed parent, whose unfinished build the next preparation removes; SIGTERM stops the
preparation and its workers at once."""

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import attnseq.data.workers as workers_module
from attnseq.config.choices import TokenizerKind
from attnseq.config.schema import DataConfig
from attnseq.data.cache import remove_stale_builds
from attnseq.data.prepare import encode_chunk
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.errors import UserError

WORDS = ["the", "a", "small", "big", "dog", "cat", "runs", "sleeps", "sees", "here", "now"]


def slow_pairs(count: int, ready_after: int = 0, pause: float = 0.0) -> Iterator[tuple[str, str]]:
    """Word pairs; after `ready_after` of them, `pause` seconds between pairs (a preparation
    still in progress)."""
    for i in range(count):
        if ready_after and i >= ready_after:
            time.sleep(pause)
        yield " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3)), "x y"


def word_tokenizers() -> TokenizerPair:
    return TokenizerPair(train_tokenizer("word", WORDS), train_tokenizer("word", ["x y"]))


@pytest.mark.parametrize(
    ("signum", "said"),
    [
        (signal.SIGKILL, r"was killed \(SIGKILL\), most likely by the kernel's out-of-memory"),
        (signal.SIGTERM, "was killed by SIGTERM"),
    ],
)
def test_a_dead_worker_is_one_line_naming_what_to_lower(
    signum: int, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed as the out-of-memory killer would, or sent SIGTERM while this process
    handles SIGTERM itself (training does): the worker does not inherit that handler, dies,
    and the preparation ends with a UserError naming data.prepare_workers, not a
    BrokenProcessPool traceback; no worker is left."""
    import multiprocessing

    cfg = DataConfig(tokenizer=TokenizerKind.word, prepare_workers=2)
    monkeypatch.setattr(workers_module, "ENCODE_CHUNK", 5)

    def stop(signum: int, frame: Any) -> None:
        raise RuntimeError("a handler of this process, not of its workers")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        encode = functools.partial(encode_chunk, "train", tokenizers=word_tokenizers(), cfg=cfg)
        chunks = workers_module.encoded_chunks(
            "train", slow_pairs(2000), encode, cfg.prepare_workers
        )
        next(chunks)
        (worker, *_) = multiprocessing.active_children()
        os.kill(worker.pid, signum)
        with pytest.raises(UserError, match=said + r".* lower data.prepare_workers \(now 2\)"):
            for _ in chunks:
                pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not multiprocessing.active_children()


PREPARING = """
import multiprocessing, sys, time
from pathlib import Path
import attnseq.data.prepare as prepare
import attnseq.data.workers as workers_module
from attnseq.config.schema import DataConfig
from attnseq.config.choices import TokenizerKind
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
{stop_signals}
words = "the a small big dog cat runs sleeps sees here now".split()
tokenizers = TokenizerPair(train_tokenizer("word", words), train_tokenizer("word", ["x y"]))
workers_module.ENCODE_CHUNK = 5

def pairs():
    for i in range(10**6):
        if i == 100:
            workers = [str(p.pid) for p in multiprocessing.active_children()]
            print("preparing", " ".join(workers), flush=True)
        if i >= 100:
            time.sleep(0.01)
        yield "the small dog", "x y"

cfg = DataConfig(tokenizer=TokenizerKind.word, prepare_workers=2)
prepare._write_cached(Path(sys.argv[1]) / "key", cfg, {{"train": pairs()}}, tokenizers, {{}})
"""


def gone(pid: int) -> bool:
    """The process has exited (a zombie no parent reaped yet counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@contextlib.contextmanager
def preparing(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, list[int], Path]]:
    """A process preparing an endless split into tmp_path/prepared with training's signal
    handlers, its two workers' pids, and the file its stderr goes to (a file: workers that
    outlive it would hold a pipe open). Workers left at the end are killed."""
    script = PREPARING.format(
        stop_signals="from attnseq.training.stopping import StopSignals\nStopSignals().__enter__()"
    )
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "prepared")],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert process.stdout is not None
    workers: list[int] = []
    try:
        line = process.stdout.readline()
        assert line.startswith("preparing "), errors.read_text()
        workers = [int(pid) for pid in line.split()[1:]]
        assert len(workers) == 2
        yield process, workers, errors
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.kill()
        process.wait()
        process.stdout.close()


def left_after(pids: list[int], seconds: float = 10.0) -> list[int]:
    """The processes of `pids` still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(gone(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if not gone(pid)]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_their_killed_parent_and_its_build_is_removed_later(
    tmp_path: Path,
) -> None:
    """SIGKILL of the preparing process: its workers end too (the parent-death signal) and
    its unfinished build stays; the next preparation on this host removes it, because its
    process is gone, and keeps a build whose process runs."""
    prepared = tmp_path / "prepared"
    with preparing(tmp_path) as (process, workers, _):
        process.kill()
        process.wait()
        assert left_after(workers) == []
    (left,) = prepared.glob("key.tmp-*")
    assert left.name.startswith(f"key.tmp-{process.pid}@{socket.gethostname()}.")
    running = prepared / f"other.tmp-{os.getpid()}@{socket.gethostname()}.abc"
    elsewhere = prepared / f"third.tmp-{process.pid}@another-host.abc"
    running.mkdir()
    elsewhere.mkdir()
    remove_stale_builds(prepared)
    assert sorted(path.name for path in prepared.iterdir()) == sorted(
        [running.name, elsewhere.name]
    )


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_during_preparation_stops_it_and_its_workers_at_once(tmp_path: Path) -> None:
    """Training's handlers turn SIGTERM into an exception in the main process: the build is
    removed and the workers stopped now, not after their chunks."""
    prepared = tmp_path / "prepared"
    with preparing(tmp_path) as (process, workers, errors):
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        assert left_after(workers, seconds=5) == []
        assert "TrainingInterrupted: stopped by SIGTERM" in errors.read_text()
    assert list(prepared.iterdir()) == []
