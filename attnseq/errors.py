"""The one exception type for mistakes the user can fix (bad config, missing file, bad checkpoint).

The CLI turns a `UserError` into one line on stderr and exit status 2, without a traceback;
every other exception is a bug in attnseq and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input: config, data files, checkpoints or command arguments."""


class OutputError(UserError):
    """A file could not be written for a reason the user can fix: the disk is full, the
    file system is read-only, or permission is denied. The file is left as it was (writes are
    atomic), so a training run stopped by it can be resumed."""
