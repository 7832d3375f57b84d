"""torch's intra-op CPU threads: what a setting may be (None, N or "auto"), the count it
stands for on this machine, and setting it (docs/internals/configuration.md). torch loads
inside the functions that set it, so the option parser and the config checks stay light."""

import os
from collections.abc import Iterator
from contextlib import contextmanager

from attnseq.errors import UserError

AUTO = "auto"
# The upper bound per CPU: OpenMP allocates per-thread state for every thread asked for, and a
# C int overflows above 2**31 - 1; no machine computes faster with more than a few per CPU.
THREADS_PER_CPU = 4

# torch's own count (one thread per physical core, or OMP_NUM_THREADS) before attnseq sets
# one: what `default_threads` starts from (`torch_default_threads`)
_torch_default: int | None = None


def thread_limit() -> int:
    """The most threads any setting may ask for: THREADS_PER_CPU x `os.cpu_count()`."""
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def check_threads(value: object, setting: str = "threads") -> int | str | None:
    """`value` when it is a valid thread setting: None (torch's default, capped at the usable
    cores), "auto" (the cores no other process keeps busy) or an int in 1..`thread_limit()`.
    `setting` is how the caller's user names it (`trainer.threads`, `threads`).

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


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, e.g. under taskset or a
    container's cpuset), else all of the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def torch_default_threads() -> int:
    """torch's own intra-op count, read the first time attnseq reads or sets threads (before
    it sets any)."""
    global _torch_default
    if _torch_default is None:
        import torch

        _torch_default = torch.get_num_threads()
    return _torch_default


def default_threads() -> int:
    """Intra-op threads when none is asked for: torch's own default capped at the usable cores,
    at least 1. It reads nothing that changes while the machine runs, so two runs of one
    command on one machine compute with the same threads, and give the same bits."""
    return max(1, min(torch_default_threads(), usable_cores()))


def load_aware_threads() -> int:
    """The threads of "auto": the usable cores minus the ones other processes keep busy,
    measured by the 1-minute load average (rounded), at least 1 and at most torch's own
    default. OpenMP threads that outnumber the free cores spin-wait for each other, so beside
    other jobs this is faster, at the price of results that depend on the load."""
    busy = round(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0
    return max(1, min(usable_cores() - busy, default_threads()))


def resolve_threads(threads: object, setting: str = "threads") -> int:
    """The thread count of a setting: `threads` itself, `load_aware_threads()` for "auto",
    `default_threads()` for None. TypeError or UserError for an invalid setting
    (`check_threads`)."""
    checked = check_threads(threads, setting)
    if checked is None:
        return default_threads()
    if checked == AUTO:
        return load_aware_threads()
    assert isinstance(checked, int)
    return checked


def use_threads(threads: object, setting: str = "trainer.threads") -> int:
    """Set torch's intra-op threads to those of the setting `threads` (`resolve_threads`) for
    the rest of the process; returns the number set. A command calls it once, before the
    model runs."""
    import torch

    torch_default_threads()  # read before the first count is set
    count = resolve_threads(threads, setting)
    torch.set_num_threads(count)
    return count


@contextmanager
def threads_set(threads: object, setting: str = "threads") -> Iterator[int]:
    """Run the block with torch's intra-op threads set as `threads` says, and put the count
    that was set before back afterwards (also when the block raises); None leaves torch's
    count as the caller has it. Yields the count the block runs with."""
    import torch

    torch_default_threads()  # read before the first count is set
    before = torch.get_num_threads()
    count = before if threads is None else resolve_threads(threads, setting)
    if count != before:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
