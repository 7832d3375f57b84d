"""The check every command runs on a text file it is given to read: the path must name a
regular file with something in it. A path that does not, says which of the cases it is (no
such file, a folder, a device such as /dev/null, a named pipe, a socket, an empty file), so
that the message points at the real mistake.

Named pipes are the one non-regular kind a command may choose to read (`translate --input
<(...)`): they can be read once, in order, and their length is unknown until then.
"""

import stat
from pathlib import Path

from attnseq.errors import UserError

# st_mode test -> what the file is, for the files that are neither regular nor folders
_SPECIAL_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


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
