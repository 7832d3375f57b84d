"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half of one.

The new content goes to a temporary file in the same folder (same filesystem, so the rename is
atomic on POSIX), is flushed and fsync'ed, then renamed over the target. The temporary file is
created private (mkstemp: 0600) and given the mode the umask gives any new file (0644 under
umask 022) before the rename, so results are as readable as the user's other files.
"""

import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from attnseq.io.output_paths import FIXABLE_ERRNOS, fixable_write_error, output_error


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
    the umask gives a new file)."""
    path = Path(path)
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
        fixable = fixable_write_error(error)
        if fixable is not None:  # a full disk or a read-only folder: the user's to fix
            raise output_error(path, fixable) from None
        raise


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
