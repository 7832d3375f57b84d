"""Progress for long work (attnseq/io/progress.py): log records kept off a live progress bar, the
training bar's tokens per second and learning rate, counting bars and their rates, every bar
whole at 80 columns."""

import io
import logging
import re

import pytest
from rich.console import Console

from attnseq.io.progress import ON_BAR, Rate, counting, logging_above


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_logging_above_routes_terminal_records_through_the_console_without_bar_lines() -> None:
    terminal, file_stream, printed = _Terminal(), io.StringIO(), io.StringIO()
    logger = logging.getLogger("attnseq")
    on_terminal = logging.StreamHandler(terminal)
    to_file = logging.StreamHandler(file_stream)  # not a terminal: like a redirected stdout
    logger.addHandler(on_terminal)
    logger.addHandler(to_file)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with logging_above(Console(file=printed, width=200)):
            logger.info("valid line")
            logger.info("interval line", extra={ON_BAR: True})
        logger.info("after the bar")
    finally:
        logger.removeHandler(on_terminal)
        logger.removeHandler(to_file)
        logger.setLevel(old_level)
    assert printed.getvalue().splitlines() == ["valid line"]
    assert terminal.getvalue().splitlines() == ["after the bar"]  # its own stream again
    assert file_stream.getvalue().splitlines() == ["valid line", "interval line", "after the bar"]
    assert not on_terminal.filters


def test_counting_reports_the_rate_and_draws_nothing_without_a_terminal(capsys) -> None:
    with counting("decode", 5) as counter:
        counter.advance(2)
        counter.advance(3)
    assert counter.rate.count == 5 and counter.rate.seconds > 0
    assert capsys.readouterr().err == ""
    summary = Rate(count=1200, seconds=2.0).summary()
    assert summary == "1,200 sentences in 2.00 s (600.0 sentences/s)"


def test_training_bar_shows_tokens_per_second_and_lr_with_log_lines_above(monkeypatch) -> None:
    import attnseq.io.progress as progress

    screen = io.StringIO()
    monkeypatch.setattr(progress, "_CONSOLE", Console(file=screen, force_terminal=True, width=200))
    monkeypatch.setattr(progress, "bars_enabled", lambda: True)
    monkeypatch.setattr(progress.TrainingProgress, "RATE_WINDOW", 0.0)
    terminal = _Terminal()
    handler = logging.StreamHandler(terminal)  # like Hydra's console handler on a terminal
    logging.getLogger("attnseq").addHandler(handler)
    logger = logging.getLogger("attnseq.test_bar")
    logger.setLevel(logging.INFO)
    try:
        with progress.TrainingProgress(4) as bar:
            bar.advance(2.0, 0, tgt_tokens=500.0, lr=1e-3)
            logger.info("a validation line")
            logger.info("an interval line", extra={ON_BAR: True})
            bar.advance(1.5, 0, tgt_tokens=500.0, lr=5e-4)
    finally:
        logging.getLogger("attnseq").removeHandler(handler)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "a validation line" in shown and "an interval line" not in shown
    assert terminal.getvalue() == ""  # nothing written past the console, onto the bar
    final = shown.splitlines()[-1]
    assert re.search(r"2/4 loss [\d.]+  [\d,]+ tok/s  lr 5.00e-04  epoch 1", final), final


@pytest.mark.parametrize("width", [80, 120])
def test_bars_fit_the_terminal_whole(width, monkeypatch) -> None:
    """The training bar and a counting bar at 80 columns (and wider): every number whole
    (no "42/…" or "ETA 0:00:…"); the bar itself gives way."""
    import attnseq.io.progress as progress

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=width, color_system=None)
    monkeypatch.setattr(progress, "_CONSOLE", console)
    monkeypatch.setattr(progress, "bars_enabled", lambda: True)
    monkeypatch.setattr(progress.TrainingProgress, "RATE_WINDOW", 0.0)
    with progress.TrainingProgress(100_000, 41_999) as bar:
        bar.advance(3.14159, 12, tgt_tokens=123_456.0, lr=3e-4)
        bar.progress.refresh()
    with counting("valid", 1_500) as counter:
        counter.advance(700)
        counter.progress.refresh()
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    frames = [line for line in re.split(r"[\r\n]", shown) if line.strip()]
    training = [line for line in frames if line.startswith("train")][-1]
    counted = [line for line in frames if line.startswith("valid")][-1]
    for line in (training, counted):
        assert "…" not in line and len(line) <= width, line
        assert re.search(r"ETA (\d+:\d\d:\d\d|-:--:--)$", line), line
    assert re.search(
        r"\s42000/100000 loss 3.142  [\d,]+ tok/s  (lr 3.00e-04  epoch|ep) 13", training
    )
    assert "700/1500 sentences" in counted
    assert ("lr 3.00e-04" in training) == (width >= progress.WIDE_CONSOLE)
