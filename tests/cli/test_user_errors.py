"""How a command ends on a mistake the user can fix (attnseq/cli/user_errors.py): a `UserError`
is one `error:` line on stderr and exit status 2; any other exception keeps its traceback."""

import pytest
import typer
from helpers import one_line_exit_2
from typer.testing import CliRunner

from attnseq.cli.user_errors import user_errors
from attnseq.errors import OutputError, UserError

app = typer.Typer()


@app.command()
def refuse(kind: str) -> None:
    with user_errors():
        if kind == "user":
            raise UserError("--size must be at least 1")
        if kind == "output":
            raise OutputError("cannot write out.txt: No space left on device")
        raise ValueError("a bug")


@pytest.mark.parametrize(
    ("kind", "message"),
    [("user", "--size must be at least 1"), ("output", "cannot write out.txt: No space left")],
)
def test_a_user_error_is_one_line_and_exit_2(kind: str, message: str) -> None:
    result = CliRunner().invoke(app, [kind])
    one_line_exit_2(result, message)
    assert result.stdout == ""


def test_any_other_exception_is_a_bug_and_keeps_its_traceback() -> None:
    result = CliRunner().invoke(app, ["bug"])
    assert isinstance(result.exception, ValueError) and result.exit_code == 1
    assert "error:" not in result.stderr
