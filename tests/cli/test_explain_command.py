"""`attnseq explain`: the page written from a checkpoint or a run directory, and every
refusal in one line with exit status 2 before any work (no page written)."""

import os
import shutil
from pathlib import Path

import pytest
from helpers import DATE_PAIRS, SHORT_POSITIONS, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.fixture(scope="module")
def run_directory(tmp_path_factory) -> Path:
    """A run directory whose checkpoints/best.pt is a tiny transformer of 10 positions."""
    run = tmp_path_factory.mktemp("explain_run")
    (run / "checkpoints").mkdir()
    untrained_checkpoint(run / "checkpoints" / "best.pt", *SHORT_POSITIONS, pairs=DATE_PAIRS)
    return run


def explain(*args: object):
    return CliRunner().invoke(app, ["explain", *map(str, args)])


@pytest.mark.slow
def test_writes_the_page_from_a_run_directory(run_directory, tmp_path) -> None:
    out = tmp_path / "report.html"
    result = explain(run_directory, "--src", "4 May", "--beam", "2", "--threads", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and str(run_directory / "checkpoints") in page
    forced = tmp_path / "forced.html"
    result = explain(
        run_directory,
        "--src",
        "4 May",
        "--tgt",
        "2001-05",
        "--methods",
        "shift-att",
        "--out",
        forced,
    )
    assert result.exit_code == 0, result.output
    assert '"methods":["shift-att"]' in forced.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--src", ""], "empty --src"),
        (["--src", "   "], "empty --src"),
        ([], "give --src TEXT"),
        (["--src", "4 May", "--tgt", ""], "empty --tgt"),
        (["--src", "4 May", "--tgt", "2001-05-04"], "at most 9"),
        (["--src", "4 May", "--methods", "attention,magic"], "got 'magic'"),
        (["--src", "4 May", "--methods", " , "], "--methods names no method"),
        (["--src", "4 May", "--layer", "3"], "--layer must be in 1..1 for this model, got 3"),
        (["--src", "4 May", "--head", "9"], "--head must be in 1..2 for this model, got 9"),
    ],
)
def test_refusals_are_one_line(run_directory, tmp_path, args, message) -> None:
    out = tmp_path / "never.html"
    result = explain(run_directory, *args, "--out", out)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in lines[-1], result.output
    assert "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.slow
def test_a_checkpoint_name_that_is_not_utf8_is_shown_in_the_page(run_directory, tmp_path):
    """The page is UTF-8: a name's bytes that are not (lone surrogates in Python) made the
    write fail with UnicodeEncodeError after the work; the page shows them as U+FFFD."""
    latin1 = os.fsdecode(bytes(tmp_path) + b"/caf\xe9.pt")
    shutil.copyfile(run_directory / "checkpoints" / "best.pt", latin1)
    out = tmp_path / "page.html"
    result = explain(latin1, "--src", "4 May", "--threads", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert "caf\ufffd.pt" in out.read_text(encoding="utf-8")


def test_rollout_of_an_rnn_is_refused(tmp_path) -> None:
    rnn = untrained_checkpoint(tmp_path / "rnn.pt", pairs=DATE_PAIRS)
    out = tmp_path / "never.html"
    result = explain(rnn, "--src", "4 May", "--methods", "attention,rollout", "--out", out)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: --methods rollout needs a transformer's self-attention; this checkpoint is an "
        "RNN (use attention or a gradient method)"
    ]
    assert not out.exists()


def test_an_unwritable_out_is_refused_before_loading(run_directory, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out, message in (
        (blocker / "report.html", "is a file, not a folder"),
        (tmp_path / "report.png", "unknown format"),
        (tmp_path, "is a folder"),
        (run_directory / "checkpoints" / "best.pt", "--out"),
    ):
        result = explain(run_directory, "--src", "4 May", "--out", out)
        assert result.exit_code == 2, (out, result.output)
        assert result.output.strip().splitlines()[-1].startswith("error: ")
        assert message in result.output, result.output
