"""The processes that encode a long split while the cache is written: `encoded_chunks`.

Workers are forked and end with their parent (Linux's parent-death signal, elsewhere a thread
that watches it); they keep SIGTERM's default action and leave SIGINT, which a terminal sends to
the whole process group, to the parent, which stops them.
"""

import collections
import contextlib
import ctypes
import itertools
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from attnseq.data.file_readers import ParallelStream
from attnseq.errors import UserError

ENCODE_CHUNK = 50_000  # pairs read, encoded and written at a time
Chunk = tuple[list[str], list[str]]  # the sources and the targets of consecutive pairs
Encoded = TypeVar("Encoded")


def _chunks(pairs: Iterable[tuple[str, str]]) -> Iterator[Chunk]:
    """The pairs `ENCODE_CHUNK` at a time (a streamed corpus: read a block of lines at a
    time, fewer at the end of a shard)."""
    if isinstance(pairs, ParallelStream):
        yield from pairs.blocks(ENCODE_CHUNK)
        return
    stream = iter(pairs)
    while chunk := list(itertools.islice(stream, ENCODE_CHUNK)):
        yield [src for src, _ in chunk], [tgt for _, tgt in chunk]


def encoded_chunks(
    name: str,
    pairs: Iterable[tuple[str, str]],
    encode: Callable[[list[str], list[str]], Encoded],
    workers: int | None,
) -> Iterator[tuple[Chunk, Encoded]]:
    """The chunks of the split `name`, in order, each with `encode(sources, targets)`.

    A split of one chunk (every validation and test set) is encoded here. A longer one is
    encoded by `workers` worker processes (None: one per core) while this process reads the
    next chunks and hands on the finished ones: the encoding is mostly Python (a dictionary
    lookup per word), so threads would share one core. Workers are forked (the tokenizers and
    settings are already in memory, nothing is imported again) and each keeps its own known
    words; a chunk's ids do not depend on which worker encodes it, so the result is the same
    as in one process. When the split is left early (an error, a stop signal) the workers
    are stopped at once rather than finishing their chunks.
    """
    chunks = _chunks(pairs)
    workers = workers or os.cpu_count() or 1
    head = list(itertools.islice(chunks, 2))
    if len(head) < 2 or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for chunk in itertools.chain(head, chunks):
            yield chunk, encode(*chunk)
        return
    fork = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        workers, mp_context=fork, initializer=_worker_started, initargs=(os.getpid(),)
    )
    # The worker processes, for their exit status: the executor forgets a dead one.
    processes: dict[int, Any] = {}
    finished = False
    try:
        pending: collections.deque[tuple[Chunk, Future[Encoded]]] = collections.deque()
        for chunk in itertools.chain(head, chunks):
            with _stop_signals_blocked():  # the workers it may start inherit the block
                future = pool.submit(encode, *chunk)
            pending.append((chunk, future))
            processes.update(getattr(pool, "_processes", None) or {})
            if len(pending) > workers:  # one chunk waiting per worker, the rest handed on
                done, encoded = pending.popleft()
                yield done, encoded.result()
        while pending:
            done, encoded = pending.popleft()
            yield done, encoded.result()
        finished = True
    except BrokenProcessPool:
        # Once the pool has shut down, every worker's exit status is known.
        pool.shutdown(wait=True, cancel_futures=True)
        raise _worker_died(name, workers, processes) from None
    finally:
        if not finished:
            for process in processes.values():
                with contextlib.suppress(OSError, ValueError):
                    process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _worker_died(name: str, workers: int, processes: dict[int, Any]) -> UserError:
    """The one-line error of a dead encoding worker: how it ended and what to lower."""
    codes = [process.exitcode for process in list(processes.values())]
    # The pool stops the other workers with SIGTERM once one has died: name another cause.
    code = next((c for c in codes if c not in (None, 0, -signal.SIGTERM)), None)
    if code is None:
        code = next((c for c in codes if c not in (None, 0)), None)
    if code == -signal.SIGKILL:
        how = "was killed (SIGKILL), most likely by the kernel's out-of-memory killer"
    elif code is not None and code < 0:
        how = f"was killed by {signal.Signals(-code).name}"
    elif code is not None:
        how = f"exited with status {code}"
    else:
        how = "died"
    return UserError(
        f"a data preparation worker {how} while encoding the {name} split; each of the "
        f"{workers} workers holds the tokenizers and {ENCODE_CHUNK:,} pairs at a time: "
        f"lower data.prepare_workers (now {workers}) or free memory, and run again"
    )


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent thread ends
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered once the block ends) while workers may be
    started: a worker starts with this process's handlers, and would act on a signal with
    them until `_worker_started` has replaced them; the block keeps the signal pending until
    then. The pool's threads started meanwhile keep the block, so the main thread gets the
    signals."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _worker_started(parent: int) -> None:
    """In each encoding worker, before any chunk: SIGTERM's default action (the handlers it
    inherits from a training process would raise an exception in it instead), SIGINT
    ignored (a terminal's Ctrl-C reaches the whole process group: the parent stops its
    workers), and death with the parent, also by SIGKILL."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held back since the fork (a SIGTERM now ends it)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    else:  # no parent-death signal: a thread that watches for being adopted
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)
