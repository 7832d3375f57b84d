"""What a CPU thread setting may be, checked before anything computes.

Every place that names torch's intra-op CPU threads (`trainer.threads`, each command's
`--threads`, the Python API's `threads=`) takes one of:

    None     torch's own default (one thread per physical core, or OMP_NUM_THREADS), capped at
             the cores this process may run on: the same count whatever else the machine runs
    N        exactly N threads, 1 <= N <= THREADS_PER_CPU x the machine's CPUs
    "auto"   the cores no other process keeps busy now (the usable cores minus the 1-minute
             load average): faster beside other jobs, but the count, and with it the float
             summation order, changes with the machine's load

The upper bound keeps an absurd count from reaching OpenMP, which allocates per-thread state
for every thread asked for (a billion threads is hundreds of GB) and overflows a C int above
2**31 - 1; no machine computes faster with more than a few threads per CPU.

This module only checks; attnseq/models/loading.py sets torch's threads from a checked
setting. Like config/devices.py it imports neither torch nor Typer, so the command line's
option parser and the config checks use it without loading torch.
"""

import os

from attnseq.errors import UserError

AUTO = "auto"
THREADS_PER_CPU = 4  # the upper bound: this many threads per CPU of the machine


def thread_limit() -> int:
    """The most threads any setting may ask for: THREADS_PER_CPU x `os.cpu_count()`."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def check_threads(value: object, setting: str = "threads") -> int | str | None:
    """`value` when it is a valid thread setting (module docstring): None, "auto" or an int in
    1..`thread_limit()`. `setting` is how the caller's user names it (`trainer.threads`,
    `threads`).

    Raises:
        TypeError: `value` is neither None, a str nor an int (a bool or a float included).
        UserError: a string other than "auto", or a number out of range.
    """
    if value is None or value == AUTO:
        return value
    if isinstance(value, str):
        raise UserError(
            f"{setting}={value!r} is not a thread count: give a whole number of threads, "
            f"{AUTO!r} (the cores other processes leave free) or None (torch's default)"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{setting} must be an int, {AUTO!r} or None, not {type(value).__name__}")
    limit = thread_limit()
    if not 1 <= value <= limit:
        raise UserError(
            f"{setting} must be in 1..{limit} ({THREADS_PER_CPU} per CPU of this machine's "
            f"{os.cpu_count() or 1}), got {value}"
        )
    return value


def parse_threads(text: str, setting: str = "threads") -> int | str:
    """A thread setting written as text (a command-line option, a `trainer.threads=` override):
    "auto" or a whole number, checked as `check_threads` does; UserError otherwise."""
    text = text.strip()
    if text == AUTO:
        return AUTO
    try:
        count = int(text)
    except ValueError:
        raise UserError(
            f"{setting} {text!r} is not a thread count: give a whole number of threads or {AUTO}"
        ) from None
    checked = check_threads(count, setting)
    assert isinstance(checked, int)
    return checked
