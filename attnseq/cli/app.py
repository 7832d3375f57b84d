"""The `attnseq` command line: the Typer app, its commands in the order `--help` lists them, and
`main`, the console script's entry point."""

import functools
import inspect
import io
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from attnseq.cli.align_command import align
from attnseq.cli.checkpoint_commands import average, export
from attnseq.cli.compare_command import compare
from attnseq.cli.completion import install_bash_script
from attnseq.cli.doctor import doctor, print_version
from attnseq.cli.eval_command import evaluate
from attnseq.cli.explain_command import explain
from attnseq.cli.heads_command import heads
from attnseq.cli.hydra_entry import torchrun_world
from attnseq.cli.score_command import score
from attnseq.cli.sweep_command import sweep_report
from attnseq.cli.train_command import TrainCommand, train
from attnseq.cli.translate_command import translate
from attnseq.cli.user_errors import user_errors
from attnseq.cli.visualize_command import visualize_alignment
from attnseq.io.user_paths import check_path_name

app = typer.Typer(
    name="attnseq",
    help=(
        "Sequence-to-sequence experiments with attention: RNN encoder-decoders with "
        "Bahdanau/Luong attention and transformers, configured with Hydra.\n\n"
        "\b\nExamples:\n"  # \b: Click keeps these lines as they are
        "  attnseq train                          # default: GRU + Bahdanau on dates\n"
        "  attnseq train data=reverse trainer.max_steps=500\n"
        "  attnseq train -m data=reverse,copy seed=1,2   # Hydra multirun sweep\n"
        "  attnseq eval outputs/DATE/TIME --beam 5        # its checkpoints/best.pt\n"
        "  attnseq translate best.pt < input.txt > output.txt\n"
        "  attnseq score best.pt --src test.de --tgt test.en > test.scores\n"
        "  attnseq average ckpt_a.pt ckpt_b.pt --out averaged.pt"
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
install_bash_script()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=print_version,
            is_eager=True,
            help="Print the versions of attnseq, torch, hydra-core and Python, and exit.",
        ),
    ] = False,
) -> None:
    """Options that come before the command (the app's help text is set above); then the
    output stream every command prints to."""
    _print_names_as_typed()


def _print_names_as_typed() -> None:
    """Let standard output print lone surrogates as the bytes they stand for.

    A path typed with bytes that are not UTF-8 reaches Python as lone surrogates
    (surrogateescape); under a UTF-8 locale other than C.UTF-8 standard output is strict, so
    printing it back ("wrote PATH") would end the command with a UnicodeEncodeError after its
    work. With surrogateescape the name is printed as it is on disk, as `ls` prints it.
    """
    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.errors == "strict":
        sys.stdout.reconfigure(errors="surrogateescape")


app.command(
    cls=TrainCommand,
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],  # --help goes to Hydra, which prints the config groups
    },
    add_help_option=False,
)(train)
# The one-line summaries `attnseq --help` lists, short enough for 80 columns (Click cuts a
# longer first sentence of the docstring with "...").
app.command(short_help="Versions, devices, data and cache: for bug reports.")(doctor)
app.command("eval", short_help="Metrics of a checkpoint on a split or a file.")(evaluate)
app.command(short_help="Translate or summarize text with a checkpoint.")(translate)
app.command(short_help="Log-probabilities of given (source, target) pairs.")(score)
app.command(short_help="Average the weights of checkpoints of one model.")(average)
app.command(short_help="Export a transformer checkpoint to CTranslate2.")(export)
app.command("visualize-alignment", short_help="Draw a model's attention heatmaps.")(
    visualize_alignment
)
app.command(short_help="Word alignments of sentence pairs (and their AER).")(align)
app.command(short_help="One HTML page: attention and attributions of an output.")(explain)
app.command(short_help="How much each attention head of a transformer matters.")(heads)
app.command("sweep-report", short_help="Table of a sweep's results, best first.")(sweep_report)
app.command(short_help="Is A better than B? Intervals, p-values, length buckets.")(compare)


def _paths_checked(command: Callable[..., None]) -> Callable[..., None]:
    """`command`, first refusing any path among its arguments that the file system cannot even
    look up (a name in it too long), with one message: the command's own checks and opens
    would each meet such a path as an OSError."""

    @functools.wraps(command)  # Typer reads the signature and help of `command` through it
    def checked(**arguments: Any) -> None:
        with user_errors():
            for name, value in arguments.items():
                for path in value if isinstance(value, list) else [value]:
                    if isinstance(path, Path):
                        check_path_name(path, _parameter_name(command, name))
        command(**arguments)

    return checked


def _parameter_name(command: Callable[..., None], name: str) -> str:
    """How the command line spells `command`'s parameter `name`: its long option (--input for
    `input_file`), or the argument's name in capitals."""
    annotation = inspect.signature(command).parameters[name].annotation
    for info in getattr(annotation, "__metadata__", ()):
        if isinstance(info, typer.models.OptionInfo):
            # in Annotated, typer.Option("--input", "-i") holds its first name as `default`
            declared = [info.default, *(info.param_decls or ())]
            spelled = [decl for decl in declared if isinstance(decl, str) and decl[:2] == "--"]
            return spelled[0] if spelled else "--" + name.replace("_", "-")
    return name.upper()


for _registered in app.registered_commands:
    assert _registered.callback is not None
    _registered.callback = _paths_checked(_registered.callback)


def _torchrun_worker() -> bool:
    """True in a process torchrun started as one of several."""
    world = torchrun_world()
    return world is not None and world.distributed


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:2] in (["-sc"], ["--shell-completion"]):
        sys.argv.insert(1, "train")  # Hydra's hint `attnseq -sc install=bash` means train's
    if not _torchrun_worker():
        app()
        return
    # A torchrun worker leaves without interpreter finalization: after a run has finished and
    # written everything, gloo's C++ threads can still abort the process while Python tears
    # down ("terminate called without an active exception", SIGABRT; pytorch/pytorch#179291),
    # and torchrun then reports the finished job as failed. By this point every file has been
    # written atomically and closed; the streams and log handlers are flushed below.
    try:
        app()
        code = 0
    except SystemExit as stop:  # typer always ends with one
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
