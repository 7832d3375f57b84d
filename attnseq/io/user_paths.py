"""The paths and files a user gives a command, checked before the work that reads or fills them,
and the write failures the user can fix as one `OutputError` (docs/internals/command_line.md)."""

import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from attnseq.errors import OutputError, UserError

# st_mode test -> what the file is, for the files that are neither regular nor folders
_SPECIAL_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(mode: int) -> str | None:
    """What a file of st_mode `mode` is, in words ("a folder", "a named pipe (FIFO)", ...);
    None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    return next((what for test, what in _SPECIAL_KINDS if test(mode)), "a special file")


def check_input_file(path: Path, name: str, *, pipes: bool = False) -> None:
    """UserError unless `path` is a regular, non-empty file (or, with `pipes`, a named pipe).

    Args:
        path: the file as the user gave it (a symbolic link counts as what it points to).
        name: how the messages name the file, e.g. "--src file" or "data file": the messages
            read "--src file not found: PATH", "--src file PATH is a folder, not a text file".
        pipes: also accept a named pipe (read as a stream; its emptiness cannot be known).
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UserError(f"{name} not found: {path}") from None
    except OSError as error:
        raise UserError(f"{name} {path} cannot be read: {error.strerror}") from None
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        raise UserError(f"{name} {path} is a folder, not a text file")
    if pipes and stat.S_ISFIFO(mode):
        return
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _SPECIAL_KINDS if test(mode)), "a special file")
        raise UserError(f"{name} {path} is {kind}, not a regular text file")
    if info.st_size == 0:
        raise UserError(f"{name} {path} is empty: it holds no lines to read")


def decoded_lines(handle: IO[bytes], name: str) -> Iterator[str]:
    """Lines split at "\\n" only (a CRLF ending loses its "\\r"; a lone "\\r" stays inside its
    line), each decoded as UTF-8; UserError naming the line that is not."""
    for number, raw in enumerate(handle, 1):
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(
                f"{name}: line {number} is not UTF-8 text ({error.reason} at byte {error.start})"
            ) from None


def check_path_name(path: Path, name: str) -> None:
    """UserError when `path` cannot be looked up at all because a name in it is longer than the
    file system allows (ENAMETOOLONG; 255 bytes on most): every later look at it (`exists`,
    `is_dir`, `open`) would raise an OSError instead of saying so.

    Args:
        path: the path as the user gave it.
        name: how the message names it, e.g. "CHECKPOINT" or "--out".
    """
    try:
        os.lstat(path)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise UserError(f"{name} {shortened(path)}: {error.strerror}") from None


def printable(path: Path | str) -> str:
    """`path` as text that every UTF-8 writer takes (a figure's title, an HTML page): a name's
    bytes that are not UTF-8, which Python holds as lone surrogates, become U+FFFD."""
    return os.fsencode(path).decode("utf-8", "replace")


def shortened(path: Path | str, keep: int = 80) -> str:
    """`path` as a message shows it: longer than `keep` characters, its start and end with the
    number of characters between them."""
    text = str(path)
    if len(text) <= keep:
        return text
    half = keep // 2
    return f"{text[:half]}...({len(text) - 2 * half} more characters)...{text[-half:]}"


# errno values that mean "fix the disk or the folder and try again", not a bug (EFBIG: a file
# size limit, ulimit -f)
FIXABLE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EFBIG}


def _writable_folder(path: Path, named: Path, option: str) -> None:
    """UserError unless the nearest existing folder at or above `path` can be written to;
    messages name the user's `named` path."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{option} {named}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(
            f"{option} {named}: cannot write into {folder} (read-only or no permission)"
        )
    try:  # the permission bits do not tell everything: /proc, a read-only mount, for root
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UserError(
            f"{option} {named}: cannot write into {folder} ({error.strerror})"
        ) from None


def refuse_special_file(path: Path, doing: str) -> None:
    """UserError when `path` is a device, a named pipe or a socket (not through a symbolic
    link, which a write replaces): outputs are written whole to a new file that is renamed
    over the old one, which would put a regular file in its place (/dev/null itself, for
    root). `doing` starts the message, e.g. "--out" or "cannot write"."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return  # nothing there (yet): nothing to replace
    kind = next((what for test, what in _SPECIAL_KINDS if test(mode)), None)
    if kind is not None:
        raise UserError(
            f"{doing} {path}: it is {kind}, and an output is written to a new file that "
            "replaces the old one; give the path of a regular file"
        )


def check_output_file(path: Path, option: str, suffixes: Iterable[str] | None = None) -> None:
    """UserError unless a file can be written at `path` (with one of `suffixes`, if given)."""
    check_path_name(path, option)
    if path.is_dir():
        raise UserError(f"{option} {path} is a folder; give a file name")
    refuse_special_file(path, option)
    if suffixes is not None:
        allowed = sorted({suffix.lower() for suffix in suffixes})
        if path.suffix.lower().lstrip(".") not in allowed:
            raise UserError(
                f"{option} {path}: unknown format {path.suffix or '(no suffix)'!r}; "
                f"use one of {', '.join('.' + s for s in allowed)}"
            )
    _writable_folder(path.parent, path, option)


def check_output_folder(path: Path, option: str) -> None:
    """UserError unless `path` is (or can be created as) a folder we can write to."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} is a file; give a folder")
    if path.is_symlink() and not path.exists():  # creating the folder would fail: it exists
        raise UserError(
            f"{option} {path} is a symbolic link to {os.readlink(path)}, which does not exist; "
            "create that folder or give another"
        )
    _writable_folder(path, path, option)


InputPaths = Iterable[tuple[str, Path | None]]
"""(option, path) pairs naming a command's inputs; a None path is an option not given."""


def _same_file(first: Path, second: Path) -> bool:
    """True when both paths exist and are one file (same device and inode, symlinks followed)."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet), or cannot be looked at
        return False


def _resolved(path: Path) -> Path:
    """`path` resolved; as given (made absolute) when it cannot be: a symbolic link that
    loops makes `Path.resolve` raise RuntimeError (OSError from Python 3.13)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def refuse_output_over_inputs(output: Path, option: str, inputs: InputPaths) -> None:
    """UserError when writing `output` would replace one of `inputs`: the same file by any
    path (symlink, hard link, `..`), also one that passes through a folder the write would
    create (`new/../input`: the kernel cannot follow it until `new` exists, so only the resolved
    path names the input), or a dangling symlink that points at an input's path."""
    for input_option, input_path in inputs:
        if input_path is None:
            continue
        if _same_file(output, input_path) or _resolved(output) == _resolved(input_path):
            raise UserError(
                f"{option} {output} is the input {input_option} {input_path}: writing it would "
                "destroy the input; choose another output path"
            )


def refuse_folder_holding_inputs(folder: Path, option: str, inputs: InputPaths) -> None:
    """UserError when `folder` is, or holds (at any depth), one of `inputs`: a command that
    replaces the folder's contents must not reach its own input."""
    if not folder.exists():
        return
    root = folder.resolve()
    for input_option, input_path in inputs:
        if input_path is None or not input_path.exists():
            continue
        resolved = input_path.resolve()
        if resolved == root or root in resolved.parents:
            raise UserError(
                f"{option} {folder} holds the input {input_option} {input_path}: "
                "choose an output folder that does not contain it"
            )


def image_suffixes() -> list[str]:
    """The file suffixes matplotlib can save a figure as (png, svg, pdf, ...)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return list(FigureCanvasAgg.get_supported_filetypes())


def fixable_write_error(error: BaseException) -> OSError | None:
    """The OSError with a fixable errno behind `error` (torch wraps its own), or None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FIXABLE_ERRNOS:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def output_error(path: Path, error: OSError) -> OutputError:
    reason = error.strerror or os.strerror(error.errno or 0)
    return OutputError(f"cannot write {path}: {reason}")
