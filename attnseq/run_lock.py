"""One trainer per run directory: an OS file lock on RUN/train.lock for the whole training.

Two trainings into one folder would overwrite each other's checkpoints and interleave
train.log, and the second one's start-up cleanup could delete the first one's half-written
checkpoint. `fcntl.flock` is held by the open file: the kernel releases it when the process
exits for any reason, SIGKILL included, so a lock left by a dead trainer never blocks a new one
(no stale-lock heuristics). The file also names the holder (pid, host, start time) so the
refusal can say who is training there.
"""

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from attnseq.errors import UserError

LOCK_NAME = "train.lock"


def _holder(handle) -> str:
    handle.seek(0)
    text = handle.read().strip()
    return text or "another process"


def _refusal(run_dir: Path, holder: str) -> UserError:
    return UserError(
        f"{run_dir} is in use: a training is running there ({holder}). Wait for it to finish, "
        "stop it, or train into another folder (hydra.run.dir=...)"
    )


@contextlib.contextmanager
def run_directory_lock(run_dir: Path) -> Iterator[None]:
    """Hold RUN/train.lock while the body runs; UserError at once if another process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # "a+" neither truncates the holder's note before the lock is ours nor fails if absent
    with open(run_dir / LOCK_NAME, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(run_dir, _holder(handle)) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def check_run_directory_free(run_dir: Path) -> None:
    """UserError if a trainer holds `run_dir`'s lock now; creates nothing (a pre-flight check
    before Hydra writes .hydra/ into the folder)."""
    path = run_dir / LOCK_NAME
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(run_dir, _holder(handle)) from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
