"""The command line's app (attnseq/cli/app.py): the commands it registers and their help texts,
whole at 80 columns. Each command is tested in the file of its module's name."""

import pytest
from typer.testing import CliRunner

from attnseq.cli.app import app


def test_help_lists_commands_with_examples() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for word in ["train", "eval", "Examples"]:
        assert word in result.output
    result = CliRunner().invoke(app, ["eval", "--help"])
    assert result.exit_code == 0 and "--split" in result.output


COMMANDS = ["train", "doctor", "eval", "translate", "score", "average", "export"]
COMMANDS += ["visualize-alignment", "align", "explain", "heads", "sweep-report", "compare"]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_whole_at_80_columns(command) -> None:
    """`attnseq --help` and every command's `--help` at COLUMNS=80: no line is cut short
    ("…", or Click's "..." after a command's summary) and none is wider than the terminal."""
    from attnseq.cli.app import app as the_app

    assert [c.name or c.callback.__name__ for c in the_app.registered_commands] == COMMANDS
    args = [command, "--help"] if command else ["--help"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) > 5
    for line in lines:
        assert "…" not in line and len(line) <= 80, line
    if "Commands:" in lines:  # Click ends a summary it had to cut with "..."
        summaries = lines[lines.index("Commands:") + 1 :]
        assert not [line for line in summaries if line.endswith("...")], summaries
    if command == "eval":  # option help has room: a default names its key whole
        text = " ".join(result.output.split())
        assert "(default: the checkpoint's decoding.length_penalty)." in text
        # --split takes any split of the data and data files, and says so
        assert "train, valid, test or another name of its data.splits" in text
        assert "a data file (.jsonl, .tsv or the prefix of a parallel pair" in text
