"""Where a run comes from: the attnseq version and the git commit of the working directory, for
the log header and the trackers' tags."""

import os
import subprocess
from pathlib import Path


def installed_version() -> str:
    """attnseq's version as installed ("unknown (not installed)" for a source tree on
    PYTHONPATH)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnseq")
    except PackageNotFoundError:
        return "unknown (not installed)"


def git_description(folder: Path) -> str:
    """ "git commit HASH" of the repository `folder` is in (", dirty" when tracked files differ
    from it), or "no git commit" (not a repository, or one without commits)."""
    try:
        head = _git(folder, "rev-parse", "HEAD")
        if head is None:
            return "no git commit"
        changed = _git(folder, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return "git not available"
    return f"git commit {head}" + (", dirty" if changed else "")


def _git(folder: Path, *args: str) -> str | None:
    """The stripped output of `git ARGS` run in `folder` (None: git failed there)."""
    environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # status must not take the lock
    done = subprocess.run(
        ["git", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=10,
        env=environment,
    )
    return done.stdout.strip() if done.returncode == 0 else None
