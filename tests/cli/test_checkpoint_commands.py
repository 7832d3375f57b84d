"""`attnseq average` and `attnseq export` (attnseq/cli/checkpoint_commands.py)."""

import os
from pathlib import Path

import helpers
from typer.testing import CliRunner

from attnseq.cli.app import app


def test_a_path_that_is_not_utf8_is_printed_as_its_bytes(tmp_path: Path) -> None:
    """argv bytes that are not UTF-8 reach Python as lone surrogates; a strict standard output
    (any UTF-8 locale but C.UTF-8, and typer's test runner) cannot encode them."""
    checkpoint = helpers.untrained_checkpoint(tmp_path / "model.pt")
    out = os.fsdecode(bytes(tmp_path / "averaged-") + b"\xff.pt")
    result = CliRunner().invoke(app, ["average", str(checkpoint), "--out", out])
    assert result.exit_code == 0, result.exception
    assert result.stdout_bytes.endswith(b"averaged-\xff.pt\n")
    assert os.path.isfile(out)
