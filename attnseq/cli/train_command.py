"""`attnseq train`: every argument is a Hydra override or flag, handed to the real
`hydra.main` entry after a pre-flight check.

Typer parses nothing here (the app registers the command with `allow_extra_args`,
`ignore_unknown_options` and no help option of its own): `--help` prints Hydra's application
help, `-sc` Hydra's shell completion, and the rest goes to `hydra_entry.run_hydra`. Hydra and
the training code are imported inside the function, so the other commands stay light.
"""

import typer
from typer.core import TyperCommand

from attnseq.cli.shared import print_version, user_errors


class TrainCommand(TyperCommand):
    """`attnseq train`: its arguments are Hydra overrides, completed by Hydra."""

    def shell_complete(self, ctx, incomplete):  # noqa: ANN001, ANN201  (click's signature)
        from typer.core import CompletionItem

        from attnseq.cli.completion import shell_word, train_completions

        matches = train_completions(list(ctx.args), shell_word(incomplete))
        return [CompletionItem(match) for match in matches]


def train(ctx: typer.Context) -> None:
    """Train a model. Every argument is a Hydra override or flag (see `attnseq train --help`).

    \b
    attnseq train                                   # the embedded default, offline
    attnseq train config=reverse_rnn_luong          # packaged experiment/reverse_rnn_luong.yaml
    attnseq train config=path/to/my.yaml            # your own experiment file
    attnseq train model.hidden=256 optim.lr=3e-4    # any override
    attnseq train -m data=reverse,copy trainer.max_steps=50   # multirun sweep
    attnseq train --cfg job                         # print the composed config
    """
    args = list(ctx.args)
    if "--version" in args:  # Hydra's own would print only Hydra's version
        print_version(True)
    completion = _shell_completion_request(args)
    if completion is not None:
        from attnseq.cli.completion import shell_completion

        with user_errors():
            typer.echo(shell_completion(completion))
        return
    from attnseq.cli import hydra_entry

    with user_errors():
        args = _prepare_run(args)
    if args is not None:
        hydra_entry.run_hydra(args)


def _prepare_run(args: list[str]) -> list[str] | None:
    """The arguments for `hydra.main` once checked, with `config=` resolved; None when the
    command is done already (its `--help` printed). UserError on any problem."""
    from attnseq.cli import hydra_entry
    from attnseq.cli.preflight import preflight
    from attnseq.cli.run_directories import settle_run_directories
    from attnseq.cli.train_help import train_help
    from attnseq.training import run_directory

    args = hydra_entry.rewrite_config_selector(args)
    help_text = train_help(args)
    if help_text is not None:
        typer.echo(help_text)
        return None
    preflight(args)
    args = settle_run_directories(args)  # checked (or made) before Hydra writes into them
    run_directory.lock_explicit_run_dir(args)  # before Hydra writes .hydra/ and train.log
    return args


def _shell_completion_request(args: list[str]) -> str | None:
    """The value of Hydra's `-sc/--shell-completion` flag (`install=bash`), if given."""
    for position, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in ("-sc", "--shell-completion"):
            if equals:
                return value
            return args[position + 1] if position + 1 < len(args) else ""
    return None
