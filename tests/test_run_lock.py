"""A run directory holds one trainer at a time; a dead trainer's lock never blocks."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import tiny_config
from typer.testing import CliRunner

from attnseq.cli import app
from attnseq.errors import UserError
from attnseq.run_lock import LOCK_NAME, check_run_directory_free, run_directory_lock
from attnseq.tasks import run_training

runner = CliRunner()


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    with run_directory_lock(tmp_path):
        holder = (tmp_path / LOCK_NAME).read_text()
        assert f"pid {os.getpid()}" in holder
        with pytest.raises(
            UserError, match=rf"in use: a training is running there \(pid {os.getpid()}"
        ):
            with run_directory_lock(tmp_path):
                pass
        with pytest.raises(UserError, match="in use"):
            check_run_directory_free(tmp_path)
    check_run_directory_free(tmp_path)  # released on exit
    with run_directory_lock(tmp_path):
        pass


def test_training_into_a_locked_folder_stops_before_touching_it(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"the other run's checkpoint")
    (tmp_path / "checkpoints" / ".last.pt.123.tmp").write_bytes(b"being written")
    with run_directory_lock(tmp_path):
        with pytest.raises(UserError, match="in use"):
            run_training(tiny_config(), tmp_path)
    assert (tmp_path / "checkpoints" / "last.pt").read_bytes() == b"the other run's checkpoint"
    assert (tmp_path / "checkpoints" / ".last.pt.123.tmp").exists()  # no clean-up of its files


def test_the_cli_refuses_before_hydra_writes_into_the_folder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with run_directory_lock(run_dir):
        result = runner.invoke(app, ["train", f"hydra.run.dir={run_dir}", "trainer.max_steps=2"])
    assert result.exit_code == 2
    assert "is in use: a training is running there" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (run_dir / ".hydra").exists()


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from attnseq.run_lock import "
            "run_directory_lock\nwith run_directory_lock(Path(sys.argv[1])):\n"
            "    print('locked', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=f"pid {holder.pid}"):
            check_run_directory_free(tmp_path)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    deadline = time.monotonic() + 10
    while True:  # the kernel drops the lock with the process
        try:
            with run_directory_lock(tmp_path):
                break
        except UserError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
