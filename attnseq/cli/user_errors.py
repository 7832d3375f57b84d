"""How a command ends on a mistake the user can fix (`UserError`): one message on stderr and
exit status 2, without a traceback."""

import contextlib
from collections.abc import Iterator

import typer

from attnseq.errors import UserError


def fail(error: UserError) -> None:
    """End the command: the error's message on stderr, exit status 2."""
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(2)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn a `UserError` raised inside the block into `fail`'s message and exit status 2;
    every other exception is a bug and keeps its traceback."""
    try:
        yield
    except UserError as error:
        fail(error)
