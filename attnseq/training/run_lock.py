"""One trainer per run directory: an OS file lock on RUN/.train.lock.

A training holds an exclusive `flock` on the file for as long as it runs; a second training
into the same directory finds it taken and stops with a UserError naming the holder (pid, host,
start time, written into the file by the holder) before it writes anything. The kernel releases
the lock when the holder's file descriptor closes, which includes every kind of exit (SIGKILL
too), so a lock file left behind by a dead process is simply taken again: stale locks need no
detection and no cleanup. (On file systems without `flock` support the lock is skipped with a
warning.) A directory the lock file cannot be written in (read-only file system, full disk, no
permission) stops the training the same way, with a UserError naming it.

The lock is reentrant within one process: `attnseq train` takes it for an explicit
`hydra.run.dir` before Hydra writes the directory's .hydra/ files and opens train.log
(`lock_explicit_run_dir`), and `run_training` (run.py) takes it again around the training itself,
which covers run directories Hydra chooses (the default time-stamped ones, multirun jobs).
Under torchrun only rank 0 locks; the other ranks never write to the run directory.
"""

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnseq.errors import UserError
from attnseq.io.user_paths import FIXABLE_ERRNOS

LOCK_NAME = ".train.lock"

log = logging.getLogger("attnseq")


@dataclass
class _Held:
    fd: int
    depth: int


_held: dict[Path, _Held] = {}  # run directory (resolved) -> this process's lock on it


def acquire(run_dir: Path) -> None:
    """Take the lock of `run_dir` (created if missing), or raise UserError naming the holder.

    Calls nest: the lock is released when every `acquire` has had its `release`.
    """
    key = run_dir.resolve()
    if key in _held:
        _held[key].depth += 1
        return
    path = run_dir / LOCK_NAME
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise unwritable(run_dir, error) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = _read_holder(fd)
        os.close(fd)
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise UserError(busy_message(run_dir, holder)) from None
        log.warning("cannot lock %s (%s): not guarding against a second training", path, error)
        return
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(sys.argv),
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode("utf-8"), 0)
    except OSError as error:
        os.close(fd)
        raise unwritable(run_dir, error) from None
    _held[key] = _Held(fd, 1)


def unwritable(run_dir: Path, error: OSError) -> OSError | UserError:
    """What to raise when the lock file of `run_dir` cannot be created or written: a UserError
    naming the directory for what the user can fix (read-only file system, full disk, no
    permission), the error itself otherwise."""
    if error.errno not in FIXABLE_ERRNOS:
        return error
    reason = error.strerror or os.strerror(error.errno or 0)
    return UserError(
        f"cannot write into run directory {run_dir}: {reason}; give a writable hydra.run.dir"
    )


def release(run_dir: Path) -> None:
    """Undo one `acquire` of `run_dir`; the last one gives the lock up."""
    key = run_dir.resolve()
    held = _held.get(key)
    if held is None:
        return
    held.depth -= 1
    if held.depth == 0:
        del _held[key]
        os.close(held.fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def run_directory_lock(run_dir: Path, enabled: bool = True) -> Iterator[None]:
    """Hold the lock of `run_dir` for the body (`enabled=False`: do nothing, e.g. on ranks
    other than 0)."""
    if not enabled:
        yield
        return
    acquire(run_dir)
    try:
        yield
    finally:
        release(run_dir)


def busy_message(run_dir: Path, holder: dict[str, object] | None) -> str:
    """One line saying who trains in `run_dir` and what to do instead."""
    who = "another process"
    if holder:
        who = f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"
    return (
        f"run directory {run_dir} is in use: a training is running in it ({who}); wait for it "
        "to end (or stop it) before training there again, or give another hydra.run.dir"
    )


def _read_holder(fd: int) -> dict[str, object] | None:
    """What the holder wrote into the lock file (None if it has not written it yet)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
        holder = json.loads(text)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def lock_explicit_run_dir(args: Sequence[str]) -> None:
    """Lock the run directory of a single `attnseq train` run given as `hydra.run.dir=DIR`,
    for the rest of this process, before Hydra writes into it. Does nothing for multirun,
    informational flags (--cfg, --help, ...), a directory with interpolations (Hydra resolves
    it) and torchrun ranks other than 0: `run_training` (run.py) locks those run directories.

    Raises UserError when another training holds it.
    """
    from attnseq.training.distributed import env_world

    if not env_world().is_main or any(arg.startswith("-") for arg in args):
        return
    run_dir = _explicit_run_dir(args)
    if run_dir is not None:
        acquire(run_dir)


def _explicit_run_dir(args: Sequence[str]) -> Path | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    candidates = [arg for arg in args if arg.lstrip("+").startswith("hydra.run.dir=")]
    if not candidates or any(arg.startswith("hydra.mode=") for arg in args):
        return None
    try:
        override = OverridesParser.create().parse_overrides([candidates[-1].lstrip("+")])[0]
        value = override.value()
    except Exception:  # the override grammar's own errors: leave the message to Hydra
        return None
    if not isinstance(value, str) or "${" in value or not value:
        return None
    return Path(value).expanduser()


def check_free(run_dir: Path) -> None:
    """UserError naming the holder when a training holds the lock of `run_dir`. Only reads: a
    start refused before it takes the lock leaves the lock file as it was."""
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return  # no lock file (or none readable): `acquire` decides
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise UserError(busy_message(run_dir, _read_holder(fd))) from None
    finally:
        os.close(fd)
