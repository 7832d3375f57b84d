"""Progress bars on stderr, on a terminal only (a notebook's caller may ask for tqdm's anywhere),
and log records kept off them while they are live (docs/internals/command_line.md)."""

import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column

# A log record with this attribute set is a periodic training line: the live bar shows the same
# numbers, so a terminal does not get it while the bar is up.
ON_BAR = "attnseq_on_bar"

_CONSOLE: Console | None = None

# Consoles at least this wide show every number on a bar (elapsed time and, in training, the
# learning rate too); narrower ones, down to 80 columns, leave those to the log lines, so that
# no number is cut short ("42/…", "ETA 0:00:…"): the bar itself shrinks first.
WIDE_CONSOLE = 110


def stderr_console() -> Console:
    """One console for every bar, so a bar started inside another nests under it."""
    global _CONSOLE
    if _CONSOLE is None:
        _CONSOLE = Console(stderr=True)
    return _CONSOLE


def bars_enabled() -> bool:
    return sys.stderr.isatty()


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (a notebook, JupyterLab, VS Code, Colab): the
    test tqdm.auto makes, IPython's shell being the kernel's."""
    kernel_shell = sys.modules.get("ipykernel.zmqshell")
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    if kernel_shell is None or get_ipython is None:
        return False
    return isinstance(get_ipython(), kernel_shell.ZMQInteractiveShell)


def quiet_tqdm() -> Any:
    """tqdm.auto's `tqdm` class (a widget bar in a Jupyter kernel with ipywidgets, else the
    text bar), imported without its "IProgress not found" warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        from tqdm.auto import tqdm
    return tqdm


if in_notebook():  # before datasets or captum import tqdm.auto (and warn) on their own
    quiet_tqdm()


# ----------------------------------------------------------------------- logging and bars
class _LineStream:
    """A text stream that hands whole lines to `write_line`, which prints them above a live
    bar (a rich console's `out`, tqdm's `write`)."""

    def __init__(self, write_line: Callable[[str], None]) -> None:
        self.write_line = write_line
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.write_line(line)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.write_line(self.pending)
            self.pending = ""


def _drop_bar_lines(record: logging.LogRecord) -> bool:
    return not getattr(record, ON_BAR, False)


def _terminal_handlers(callers_streams: bool = False) -> list[logging.StreamHandler]:
    """Stream handlers (not files) of the root and attnseq loggers that write to a terminal;
    with `callers_streams`, also those writing to this process's stderr or stdout whatever
    they are (a notebook's output)."""
    found = []
    for logger in (logging.getLogger(), logging.getLogger("attnseq")):
        for handler in logger.handlers:
            if type(handler) is not logging.StreamHandler:
                continue  # FileHandler and others write to files
            stream = getattr(handler, "stream", None)
            isatty = getattr(stream, "isatty", None)
            if getattr(stream, "closed", False):
                continue  # a stream closed under the handler (e.g. a test runner's capture)
            shown = callers_streams and stream in (sys.stderr, sys.stdout)
            if (shown or (isatty is not None and isatty())) and handler not in found:
                found.append(handler)
    return found


def logging_above(console: Console) -> contextlib.AbstractContextManager[None]:
    """While a live display holds the terminal: terminal log handlers write through its console
    (so a record never lands on the bar), without the periodic lines the bar already shows."""
    return _lines_above(_terminal_handlers(), lambda line: console.out(line, highlight=False))


@contextlib.contextmanager
def _lines_above(
    handlers: list[logging.StreamHandler], write_line: Callable[[str], None]
) -> Iterator[None]:
    """`handlers` write their records through `write_line` (above a bar), without the
    periodic lines the bar shows, while the block runs."""
    streams = []
    for handler in handlers:
        streams.append(handler.setStream(_LineStream(write_line)))  # type: ignore[arg-type]
        handler.addFilter(_drop_bar_lines)
    try:
        yield
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.flush()
            handler.removeFilter(_drop_bar_lines)
            handler.setStream(stream)


def _flexible_bar() -> BarColumn:
    """A bar that takes the width the text columns leave (a ratio column): on a narrow
    terminal it shrinks, and the numbers beside it stay whole."""
    return BarColumn(bar_width=None, table_column=Column(ratio=1))


def _rich_bar(
    console: Console, label: str, numbers: str, *, transient: bool, redirect_stderr: bool
) -> Progress:
    """A rich bar: `label`, the bar, done/total, the `numbers` column, the elapsed time (on a
    console of `WIDE_CONSOLE` columns or more), the ETA. A redirected stdout stays where it
    is; on a terminal, text printed meanwhile goes above the bar."""
    return Progress(
        TextColumn(f"[bold]{label}[/]"),
        _flexible_bar(),
        MofNCompleteColumn(),
        TextColumn(numbers),
        *([TimeElapsedColumn()] if console.width >= WIDE_CONSOLE else []),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        expand=True,
        transient=transient,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=redirect_stderr,
    )


# ----------------------------------------------------------------------- training bar
class TrainingProgress:
    """`with TrainingProgress(total, start, enabled) as bar: bar.advance(loss, epoch, ...)`.

    Args:
        enabled: show a bar at all; it is drawn on a terminal (rich), and elsewhere only with
            `anywhere`.
        anywhere: also when stderr is no terminal (a Jupyter kernel, a file): tqdm's bar
            (`quiet_tqdm`), log records to the caller's stderr and stdout printed above it.
    """

    RATE_WINDOW = 2.0  # seconds of steps behind the tokens/s the bar shows

    def __init__(
        self, total_steps: int, start_step: int = 0, enabled: bool = True, anywhere: bool = False
    ) -> None:
        self.enabled = enabled and (anywhere or bars_enabled())
        self.total = total_steps
        self.start = start_step
        self.progress: Progress | None = None
        self.text_bar: Any = None  # tqdm's bar, where rich's is not drawn
        self.task = None
        self.smoothed_loss: float | None = None
        self._above = contextlib.ExitStack()
        self._window_start = time.perf_counter()
        self._window_tokens = 0.0
        self.tokens_per_sec: float | None = None

    def __enter__(self) -> "TrainingProgress":
        if not self.enabled:
            return self
        if bars_enabled():
            self._start_rich()
        else:
            tqdm = quiet_tqdm()
            self.text_bar = tqdm(
                total=self.total,
                initial=self.start,
                desc="train",
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
            )

            def write(line: str) -> None:
                tqdm.write(line, file=sys.stderr)  # clears the text bar, prints, redraws it

            self._above.enter_context(_lines_above(_terminal_handlers(True), write))
        return self

    def _start_rich(self) -> None:
        console = stderr_console()
        wide = console.width >= WIDE_CONSOLE
        numbers = "loss {task.fields[loss]}  {task.fields[speed]} tok/s"
        numbers += "  lr {task.fields[lr]}  epoch {task.fields[epoch]}" if wide else ""
        numbers += "" if wide else "  ep {task.fields[epoch]}"
        self.progress = _rich_bar(console, "train", numbers, transient=False, redirect_stderr=True)
        self.progress.start()
        self._above.enter_context(logging_above(self.progress.console))
        self.task = self.progress.add_task(
            "train",
            total=self.total,
            completed=self.start,
            loss="-",
            epoch=0,
            speed="-",
            lr="-",
        )

    def advance(
        self, loss: float | None, epoch: int, tgt_tokens: float = 0.0, lr: float = 0.0
    ) -> None:
        """One update: its loss (None: not read from the device yet, see `add_losses`), the
        epoch it is in (0-based), its target tokens, the lr."""
        if loss is not None:
            self.add_losses([loss])
        self._window_tokens += tgt_tokens
        now = time.perf_counter()
        if now - self._window_start >= self.RATE_WINDOW:
            self.tokens_per_sec = self._window_tokens / (now - self._window_start)
            self._window_start, self._window_tokens = now, 0.0
        speed = "-" if self.tokens_per_sec is None else f"{self.tokens_per_sec:,.0f}"
        shown_loss = "-" if self.smoothed_loss is None else f"{self.smoothed_loss:.3f}"
        if self.progress is not None:
            self.progress.update(
                self.task,
                advance=1,
                loss=shown_loss,
                epoch=epoch + 1,
                speed=speed,
                lr=f"{lr:.2e}",
            )
        elif self.text_bar is not None:
            numbers = f"loss {shown_loss}, {speed} tok/s, lr {lr:.2e}, epoch {epoch + 1}"
            self.text_bar.set_postfix_str(numbers, refresh=False)
            self.text_bar.update(1)

    def add_losses(self, losses: Sequence[float]) -> None:
        """Losses of updates read since the last call, oldest first, into the bar's loss."""
        for loss in losses:  # exponential moving average: a readable loss, not one batch's noise
            previous = self.smoothed_loss
            self.smoothed_loss = loss if previous is None else 0.95 * previous + 0.05 * loss

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._above.close()
        if self.progress is not None:
            self.progress.stop()
        if self.text_bar is not None:
            self.text_bar.close()


# ----------------------------------------------------------------------- counted work
@dataclass
class Rate:
    """How much work a `counting` block did and how long it took."""

    count: int = 0
    seconds: float = 0.0
    unit: str = "sentences"

    @property
    def per_second(self) -> float:
        return self.count / max(self.seconds, 1e-9)

    def summary(self) -> str:
        """e.g. '500 sentences in 3.1 s (161.3 sentences/s)'."""
        return (
            f"{self.count:,} {self.unit} in {self.seconds:.2f} s "
            f"({self.per_second:,.1f} {self.unit}/s)"
        )


class _Counter:
    def __init__(self, progress: Progress | None, task: object, rate: Rate) -> None:
        self.progress, self.task, self.rate = progress, task, rate

    def advance(self, count: int) -> None:
        self.rate.count += count
        if self.progress is not None:
            self.progress.update(self.task, advance=count)  # type: ignore[arg-type]


@contextlib.contextmanager
def counting(
    label: str, total: int | None, unit: str = "sentences", enabled: bool = True
) -> Iterator[_Counter]:
    """A transient bar `label` for `total` items (None: unknown) on a terminal, nothing
    elsewhere; `counter.advance(n)` after each piece of work, `counter.rate` at the end."""
    rate = Rate(unit=unit)
    start = time.perf_counter()
    progress = None
    task = None
    if enabled and bars_enabled():
        console = stderr_console()
        progress = _rich_bar(console, label, unit, transient=True, redirect_stderr=False)
        progress.start()
        task = progress.add_task(label, total=total)
    above = logging_above(progress.console) if progress is not None else contextlib.nullcontext()
    try:
        with above:
            yield _Counter(progress, task, rate)
    finally:
        rate.seconds = time.perf_counter() - start
        if progress is not None:
            progress.stop()
