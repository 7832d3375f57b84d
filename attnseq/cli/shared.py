"""What every command of the command line shares: the way a user's mistake ends a command,
the version printout, and the argument and option types that several commands declare.

A mistake the user can fix (`UserError`) ends with one message on stderr and exit status 2,
without a traceback. The types are `Annotated` aliases, so a command's signature reads
`checkpoint: CheckpointArgument` and the help text of an option lives in one place.

This module imports only Typer: every command module imports it, and `attnseq --help` must
answer without the heavy libraries.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

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


def print_version(value: bool) -> None:
    """The versions of attnseq, torch, hydra-core and Python, then exit (when `value`)."""
    if value:
        from attnseq.cli.doctor import version_lines

        typer.echo("\n".join(version_lines()))
        raise typer.Exit()


CheckpointArgument = Annotated[
    Path, typer.Argument(help="A checkpoint written by `attnseq train` or `attnseq average`.")
]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
