"""Which run directories a training may write into: one run per directory (resume, overwrite or
refuse), one trainer per directory (an OS lock) (docs/internals/training.md)."""

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnseq.errors import UserError
from attnseq.io.user_paths import FIXABLE_ERRNOS, check_output_folder

log = logging.getLogger("attnseq")

# What a training (and `attnseq eval` of its checkpoints) writes into its run directory.
RUN_OUTPUTS = ("checkpoints", "tb", "hyps", "eval", "metrics.json")


def run_outputs(run_dir: Path) -> list[str]:
    """The names of `RUN_OUTPUTS` present in `run_dir` (an empty folder does not count)."""
    found = []
    for name in RUN_OUTPUTS:
        path = run_dir / name
        if path.is_dir():
            if any(path.iterdir()):
                found.append(name)
        elif path.exists():
            found.append(name)
    return found


def continues_run(resume: str | None, run_dir: Path) -> bool:
    """Whether `resume` continues the run in `run_dir`: resume=auto, or one of its own
    checkpoints (RUN_DIR/checkpoints/NAME.pt)."""
    if resume is None:
        return False
    if resume == "auto":
        return True
    checkpoint_folder = Path(resume).expanduser().absolute().parent
    return checkpoint_folder == (run_dir / "checkpoints").absolute()


def check_run_directory(
    run_dir: Path, resume: str | None, overwrite: bool, elsewhere: str = "hydra.run.dir=DIR"
) -> None:
    """Refuse a training into `run_dir` that would mix with (or replace) the run it holds,
    unless `resume` continues that run or `overwrite` replaces it.

    `elsewhere` is the override that chooses another directory (in a sweep, hydra.sweep.dir).

    Raises:
        UserError: `run_dir` is a file or cannot be written into; or one line naming the
            run's outputs and the three ways on.
    """
    check_output_folder(run_dir, elsewhere.split("=")[0])
    found = run_outputs(run_dir)
    if not found or overwrite or continues_run(resume, run_dir):
        return
    started = f"resume={resume} starts from another run's checkpoint; " if resume else ""
    raise UserError(
        f"run directory {run_dir} already holds a run ({', '.join(found)}); {started}continue "
        f"it with resume=auto, start the new run elsewhere with another {elsewhere}, or replace "
        "it with trainer.overwrite=true"
    )


def clear_previous_run(run_dir: Path) -> list[str]:
    """Delete the outputs of the run that `run_dir` holds (`RUN_OUTPUTS`; their folders stay,
    emptied, so a folder that is a link to other storage keeps its link). Returns their names.
    Everything else in `run_dir` (Hydra's record, train.log, the user's own files) stays."""
    found = run_outputs(run_dir)
    for name in found:
        path = run_dir / name
        children = list(path.iterdir()) if path.is_dir() else [path]
        for child in children:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    if found:
        log.info(
            "trainer.overwrite=true: deleted the previous run's %s in %s", ", ".join(found), run_dir
        )
    return found


LOCK_NAME = ".train.lock"


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
    while True:
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
        if _still_named(fd, path):
            break
        os.close(fd)  # the holder removed the file as it finished: lock the new one
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
        # Removed while still locked, so a finished run keeps no lock file; a process that
        # opened it before and locks it after finds it no longer named (`_still_named`).
        with contextlib.suppress(OSError):
            os.unlink(run_dir / LOCK_NAME)
        os.close(held.fd)  # closing the descriptor releases the flock


def _still_named(fd: int, path: Path) -> bool:
    """Whether the file open as `fd` is still the one at `path` (not removed or replaced by
    a holder that finished between our open and our lock)."""
    try:
        named, opened = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


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


def claim_fresh(path: Path) -> Path:
    """Create `path`, or the first of `path`_2, `path`_3, ... that does not exist yet, and return
    it. mkdir either creates a folder or fails, so two runs started at once get two folders."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate, number = path, 1
        while True:
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                number += 1
                candidate = path.with_name(f"{path.name}_{number}")
    except OSError as error:
        raise UserError(f"cannot create the run directory {path}: {error.strerror}") from None
