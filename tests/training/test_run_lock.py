"""One trainer per run directory: a second training into a directory another process trains
in stops with exit status 2 and one line naming the holder, before writing anything; a lock
left by a killed process does not block; a run directory the lock cannot be written in
(read-only file system, full disk, no permission) stops the same way."""

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TINY, attnseq, tiny_config

from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training import run_directory
from attnseq.training.run import run_training

HOLD = (
    "import sys, time; from pathlib import Path; from attnseq.training import run_directory; "
    "run_directory.acquire(Path(sys.argv[1])); print('locked', flush=True); time.sleep(120)"
)


def holder(run_dir: Path) -> subprocess.Popen:
    """Another process holding the lock of run_dir (until it is killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    return process


def test_a_held_directory_refuses_a_second_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = holder(run_dir)
    try:
        with pytest.raises(UserError) as error:
            run_directory.acquire(run_dir)
        message = str(error.value)
        assert f"pid {process.pid} on " in message and "in use" in message
        assert "\n" not in message
        # the library entry point too: nothing read or written, no checkpoint folder
        with pytest.raises(UserError, match=f"pid {process.pid}"):
            run_training(tiny_config(), run_dir)
        assert sorted(p.name for p in run_dir.iterdir()) == [run_directory.LOCK_NAME]
    finally:
        process.kill()
        process.wait()


def test_a_lock_left_by_a_killed_process_is_free(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = holder(run_dir)
    process.send_signal(signal.SIGKILL)
    process.wait()
    left = json.loads((run_dir / run_directory.LOCK_NAME).read_text())
    assert left["pid"] == process.pid  # the file stays; the kernel released the lock
    with run_directory.run_directory_lock(run_dir):
        mine = json.loads((run_dir / run_directory.LOCK_NAME).read_text())
        assert mine["pid"] == os.getpid()
        with run_directory.run_directory_lock(run_dir):  # reentrant within one process
            pass
        assert run_dir.resolve() in run_directory._held  # still held after the inner exit
    assert run_dir.resolve() not in run_directory._held
    # given back: another process can take it now
    other = holder(run_dir)
    other.kill()
    other.wait()


def test_cli_train_into_a_busy_directory_exits_2_writing_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = holder(run_dir)
    try:
        result = attnseq("train", *TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run directory")
    assert f"pid {process.pid}" in lines[0] and "Traceback" not in result.stderr
    # Hydra never ran: no .hydra/, no train.log, no checkpoints
    assert sorted(p.name for p in run_dir.iterdir()) == [run_directory.LOCK_NAME]


def erofs(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))


@pytest.mark.parametrize("where", ["mkdir", "open", "write"])
def test_a_read_only_run_directory_is_one_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """EROFS wherever the lock meets it (creating the directory, opening or writing the lock
    file) is a one-line UserError naming the directory; the lock is not held."""
    run_dir = tmp_path / "runs" / "run"
    if where == "mkdir":
        monkeypatch.setattr(run_directory.Path, "mkdir", erofs)
    elif where == "open":
        monkeypatch.setattr(run_directory.os, "open", erofs)
    else:
        monkeypatch.setattr(run_directory.os, "pwrite", erofs)
    with pytest.raises(UserError) as error:
        run_directory.acquire(run_dir)
    monkeypatch.undo()
    message = str(error.value)
    assert f"run directory {run_dir}" in message and "Read-only file system" in message
    assert "\n" not in message
    assert run_dir.resolve() not in run_directory._held


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_run_directory_without_write_permission_is_one_user_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o555)
    try:
        with pytest.raises(UserError, match=f"cannot write into run directory {run_dir}"):
            run_directory.acquire(run_dir)
    finally:
        run_dir.chmod(0o755)
    assert list(run_dir.iterdir()) == []


READ_ONLY_TRAIN = (
    "import errno, os, sys\n"
    "real = os.open\n"
    "def read_only(path, *args, **kwargs):\n"
    "    if str(path).startswith(sys.argv[-1].split('=', 1)[1]):\n"
    "        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))\n"
    "    return real(path, *args, **kwargs)\n"
    "os.open = read_only\n"
    "from attnseq.cli.app import main\n"
    "main()\n"
)


def test_cli_train_into_a_read_only_run_directory_exits_2(tmp_path: Path) -> None:
    """`attnseq train hydra.run.dir=RUN` on a read-only file system (every open under RUN
    fails with EROFS): one line, exit 2, nothing written."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", READ_ONLY_TRAIN, "train", *TINY, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: cannot write into run directory {run_dir}")
    assert "Read-only file system" in lines[0] and "Traceback" not in result.stderr
    assert list(run_dir.iterdir()) == []


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_two_trainings_into_one_directory(tmp_path: Path) -> None:
    """A real first training keeps its directory: the second exits 2 with one line, the first's
    .hydra/ and log are untouched by it, and the first ends normally with its own checkpoint."""
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnseq",
            "train",
            *TINY,
            "trainer.max_steps=100000",
            "trainer.max_epochs=100000",
            "trainer.validate_every=5",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        last = run_dir / "checkpoints" / "last.pt"
        for _ in range(600):  # the first has started training once it saved a checkpoint
            if last.is_file() or first.poll() is not None:
                break
            time.sleep(0.1)
        assert last.is_file() and first.poll() is None
        hydra_files = digest(run_dir / ".hydra")
        second = attnseq(
            "train", *TINY, "data.train_size=37", f"hydra.run.dir={run_dir}", cwd=tmp_path
        )
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: run directory")
        assert f"pid {first.pid}" in lines[0]
        assert digest(run_dir / ".hydra") == hydra_files
        assert first.poll() is None  # still training
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
        assert first.returncode == 143
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    config = load_checkpoint(last)["config"]
    assert config["data"]["train_size"] == 200  # the first run's, not the second's
    assert "train: 37 pairs" not in (run_dir / "train.log").read_text()
