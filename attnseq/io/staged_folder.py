"""A folder of files written in full before any of them takes its place: the old files or the new
ones, never half of a write.

`write_staged_folder` lets a writer fill a private staging folder, then moves the result into
place only once the writer returned:

- a new folder: the staging folder is renamed to it, one atomic step;
- an existing folder: each new file replaces its namesake with one rename (`os.replace`, atomic
  per file; the `last` file moves after all others, so a reader that trusts it sees a complete
  set), then the files of `replaced` that the new write did not produce are removed. Every other
  file in the folder stays, and the folder itself (its inode, mode, owner, a symlink that reaches
  it) is kept.

The staging folder lives where the files end up (inside the existing folder, or beside the new
one in its parent), so every move is a rename within one file system. Any failure removes it
and leaves the folder as it was; a failure the user can fix (full disk, read-only file system,
no permission) becomes one `OutputError` naming the folder. A staging folder left by a killed
process carries `STAGING_PREFIX` in its name and is removed by the next write into the folder.
"""

import os
import shutil
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

from attnseq.io.output_paths import fixable_write_error, output_error

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
        fixable = fixable_write_error(error)
        if fixable is not None:
            raise output_error(folder, fixable) from None
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
        fixable = fixable_write_error(error)
        if fixable is not None:
            raise output_error(folder, fixable) from None
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
