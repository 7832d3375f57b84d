"""SIGINT/SIGTERM during training: finish the current step, write last.pt, exit resumably.

`StopSignals` turns the first signal inside the training loop into a request the loop honours
at the next step boundary; `TrainingInterrupted` carries the signal out to the CLI, which exits
with the shell's 128 + signal number (130 for Ctrl-C, 143 for SIGTERM).
"""

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from attnseq.training.distributed import is_main_process


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped the run.

    Attributes:
        signum: the signal.
        graceful: True when the loop finished its step and wrote last.pt at `step`; False when
            the run stopped at once (second SIGINT, or outside the training loop).
        step: the step of the newest last.pt this process wrote (None: none yet).
    """

    def __init__(self, signum: int, graceful: bool, step: int | None = None) -> None:
        self.signum = signum
        self.graceful = graceful
        self.step = step
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_status(self) -> int:
        """128 + signal number, the shell's convention: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


# ------------------------------------------------------------------------------ signals
class StopSignals:
    """SIGINT/SIGTERM handling for a training run (`with StopSignals() as stop: ...`).

    Inside `stop.graceful()` (the training loop) the first signal only records a request: the
    loop finishes the current step, writes last.pt and raises `TrainingInterrupted`, so no update
    is lost. A second SIGINT there, or a signal anywhere else in the block (data preparation, the
    final test evaluation), raises `TrainingInterrupted` at once; the atomic writers remove
    their temporary file, so even then every file on disk is whole.

    Handlers can only be installed from the main thread; elsewhere this does nothing and the
    process keeps its default behaviour.

    Under torchrun the agent forwards SIGINT/SIGTERM to every rank (and a terminal's Ctrl-C
    reaches them all). The request of any rank is combined into the all-reduce that closes each
    step, so all ranks finish the same step, rank 0 writes last.pt and every rank raises
    `TrainingInterrupted`; nothing waits on a rank that has left. torchrun kills workers that
    have not exited some 30 s after forwarding the signal, so a step plus one checkpoint write
    must fit in that time. A second Ctrl-C stops that rank at once; torchrun then ends the rest.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._graceful = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @contextlib.contextmanager
    def graceful(self) -> Iterator[None]:
        self._graceful = True
        try:
            yield
        finally:
            self._graceful = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if self._graceful and (first or signum != signal.SIGINT):
            if first and is_main_process():  # under torchrun every rank gets the signal
                # os.write, not print/logging: a handler may interrupt the main thread inside
                # a buffered write, and re-entering the same buffer raises.
                name = signal.Signals(signum).name
                os.write(
                    2,
                    f"\nattnseq: {name} received: finishing the current step and writing "
                    "last.pt (press Ctrl-C again to stop at once)\n".encode(),
                )
            return
        raise TrainingInterrupted(signum, graceful=False)
