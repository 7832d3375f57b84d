"""The exception types of mistakes the user can fix; every other exception is a bug and keeps its
traceback (docs/internals/command_line.md)."""


class UserError(Exception):
    """A problem with the user's input: config, data files, checkpoints or command arguments."""


class OutputError(UserError):
    """A file could not be written for a reason the user can fix: the disk is full, the
    file system is read-only, or permission is denied. The file is left as it was (writes are
    atomic), so a training run stopped by it can be resumed."""
