"""All-or-nothing writes of a file or a folder of files: a reader, or a crash, sees the old
version or the new one, never half of one (docs/internals/command_line.md)."""

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path
from typing import IO, Any

from attnseq.io.user_paths import (
    FIXABLE_ERRNOS,
    fixable_write_error,
    output_error,
    refuse_special_file,
)


def current_umask() -> int:
    """The process's umask. Linux reports it in /proc/self/status; elsewhere it is read by
    setting and restoring it, and the value set meanwhile is the most private one, so a file
    another thread creates in that instant is at worst too private, never too open."""
    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The permission bits `open(path, "w")` gives a new file under the current umask."""
    return 0o666 & ~current_umask()


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Call `write(file)` on a temporary binary file, then move it to `path` (with the mode
    the umask gives a new file).

    Raises:
        UserError: `path` is a device, a named pipe or a socket: the rename would put a
            regular file in its place (for root, /dev/null itself).
    """
    path = Path(path)
    refuse_special_file(path, "cannot write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        if error.errno in FIXABLE_ERRNOS:
            raise output_error(path, error) from None
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            os.chmod(tmp_name, new_file_mode())
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as error:
        Path(tmp_name).unlink(missing_ok=True)
        _raise_fixable(path, error)
        raise


def _raise_fixable(path: Path, error: BaseException) -> None:
    """The OutputError naming `path` when `error` is a write failure the user can fix (a full
    disk, a read-only folder); nothing otherwise, for the caller to re-raise `error`."""
    fixable = fixable_write_error(error)
    if fixable is not None:
        raise output_error(path, fixable) from None


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def atomic_write_lines(path: str | Path, lines: list[str]) -> None:
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete the temporary files of writes that a killed process left in `folder`
    (`atomic_write` names them .NAME.<random>.tmp; finished files are never touched). Run at the
    start of a run, when no other writer of the folder can be active."""
    removed = []
    if folder.is_dir():
        for stale in sorted(folder.glob(".*.tmp")):
            logging.getLogger("attnseq").info(
                "removing %s, left by an interrupted checkpoint write", stale
            )
            stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


STAGING_PREFIX = ".attnseq-staging-"


def write_staged_folder(
    folder: Path, write: Callable[[Path], None], replaced: Collection[str], last: str
) -> None:
    """Call `write(staging)` on a new empty folder, then move its files into `folder`.

    Args:
        folder: the destination; created (with its parents) when missing, followed when a
            symlink.
        write: fills the staging folder it is given with plain files.
        replaced: names of files in an existing `folder` that belong to this kind of write:
            those the new write does not produce are removed, every other file stays.
        last: the file that moves into an existing `folder` after all the others.

    Raises:
        OutputError: the disk is full, the file system is read-only or permission is denied;
            `folder` is as it was and no staging folder is left.
    """
    try:
        home = folder if folder.is_dir() else folder.parent
        home.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=home))
    except OSError as error:
        _raise_fixable(folder, error)
        raise
    try:
        staging = root / "files"
        staging.mkdir()  # the mode the umask gives a new folder (mkdtemp's root is 0700)
        write(staging)
        if folder.is_dir():
            _move_files_into(staging, folder, replaced, last, keep=root)
        else:
            os.rename(staging, folder)
    except BaseException as error:
        _raise_fixable(folder, error)
        raise
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _move_files_into(
    staging: Path, folder: Path, replaced: Collection[str], last: str, keep: Path
) -> None:
    """Replace `folder`'s files by the staged ones, `last` at the end; then drop the files of
    `replaced` that were not staged and the staging folders of killed writes (not `keep`)."""
    names = sorted(path.name for path in staging.iterdir())
    names.sort(key=lambda name: name == last)  # stable: `last` moves after all others
    for name in names:
        os.replace(staging / name, folder / name)
    for name in set(replaced) - set(names):
        path = folder / name
        if path.is_file() or path.is_symlink():
            path.unlink()
    for stale in folder.glob(STAGING_PREFIX + "*"):
        if stale.resolve() != keep.resolve():
            shutil.rmtree(stale, ignore_errors=True)
