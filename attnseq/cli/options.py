"""The arguments and options several commands declare, as `Annotated` types (a command's
signature reads `checkpoint: CheckpointArgument`; the help lives here), and the checks of their
values. It imports only Typer: every command imports it, and `--help` stays light."""

from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.user_errors import fail, user_errors
from attnseq.errors import UserError


def at_least_one(value: int, option: str) -> int:
    """`value` of the count option `option` (resamples, trials, a seed), or a UserError below 1."""
    if value < 1:
        raise UserError(f"{option} must be >= 1, got {value}")
    return value


def check_utf8(text: str | None, option: str) -> None:
    """UserError for an option whose bytes were no UTF-8: Python hands such argv bytes over as
    lone surrogates (surrogateescape), which no page, figure or file could be written with."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UserError(
            f"{option} is not UTF-8 text (byte {error.start} of it); give it in UTF-8"
        ) from None


# what marks a folder as a run directory of `attnseq train`
RUN_DIRECTORY_MARKS = ("checkpoints", ".hydra", "train.log")


def run_directory_checkpoint(ctx: typer.Context, path: Path | None) -> Path | None:
    """A run directory given where a checkpoint is expected stands for its
    checkpoints/best.pt (said on stderr); any other path is returned as it is.

    A run directory without best.pt (a run that has not validated yet, or a refused start)
    ends the command with what to pass instead. A folder that is no run directory is left to
    the command (`translate --engine ctranslate2` takes an exported model's folder).
    """
    if ctx.resilient_parsing or path is None:
        return path  # shell completion parses without acting
    from attnseq.io.user_paths import check_path_name

    with user_errors():
        check_path_name(path, "CHECKPOINT")
    if not path.is_dir():
        return path
    if not any((path / mark).exists() for mark in RUN_DIRECTORY_MARKS):
        return path
    best = path / "checkpoints" / "best.pt"
    if best.is_file():
        typer.echo(f"using {best} (the best checkpoint of the run directory {path})", err=True)
        return best
    last = path / "checkpoints" / "last.pt"
    if last.is_file():
        fail(
            UserError(
                f"{path} is a run directory without checkpoints/best.pt (the run has not "
                f"validated yet); pass a checkpoint file, e.g. {last}"
            )
        )
    fail(
        UserError(
            f"{path} is a run directory that holds no checkpoint (its training has not "
            "saved one: it failed to start or is just starting); pass a checkpoint file, "
            "RUN/checkpoints/best.pt of a run that has validated"
        )
    )
    return None  # not reached: fail() exits


CheckpointArgument = Annotated[
    Path,
    typer.Argument(
        help="A checkpoint written by `attnseq train` or `attnseq average`, or a run "
        "directory (its checkpoints/best.pt).",
        callback=run_directory_checkpoint,
    ),
]


def device_option(ctx: typer.Context, name: str) -> str:
    """`--device` as torch spells devices (attnseq/config/devices.py), checked against this
    machine before the command loads anything."""
    if ctx.resilient_parsing or name == "auto":
        return name  # auto always resolves; completion parses without acting
    from attnseq.config.devices import resolve_device

    try:
        resolve_device(name, "--device")
    except UserError as error:
        fail(error)
    return name


DeviceOption = Annotated[
    str,
    typer.Option(
        help="auto (cuda when there is one, else cpu), cpu, cuda, cuda:N or mps.",
        callback=device_option,
    ),
]


def threads_option(text: str) -> int | str:
    """--threads as text: a whole number in 1..4 x the CPUs, or auto
    (attnseq/config/threads.py); anything else is a usage error, exit status 2."""
    from attnseq.config.threads import parse_threads

    try:
        return parse_threads(text, "--threads")
    except UserError as error:
        raise typer.BadParameter(str(error).removeprefix("--threads ")) from None


ThreadsOption = Annotated[
    str | None,  # the parser gives an int or "auto"
    typer.Option(
        parser=threads_option,
        metavar="N|auto",
        help="CPU threads of torch (intra-op), at most 4 per CPU. Default: trainer.threads=N "
        "if given, else torch's default capped at the usable cores (the same whatever else "
        "runs); auto: the cores no other process keeps busy (faster beside other jobs, but "
        "the results then depend on the load).",
    ),
]


def apply_threads(threads: int | str | None, overrides: list[str] | None = None) -> int:
    """Set torch's CPU threads for this command and return how many: `--threads`, else a
    `trainer.threads=N` (or auto) among the overrides, else torch's default capped at the
    usable cores (`default_threads`, attnseq/config/threads.py). A checkpoint's own
    trainer.threads describes the machine it was trained on, not this one, so it is not used.
    UserError for an override that is no thread setting."""
    from attnseq.config.threads import parse_threads, use_threads

    setting = "--threads"
    if threads is None:
        for override in overrides or []:
            key, _, value = override.partition("=")
            if key.strip().lstrip("+") == "trainer.threads" and value.strip() != "null":
                setting = "trainer.threads"
                threads = parse_threads(value, setting)
    return use_threads(threads, setting)


# --batch-size of the commands that batch by a token budget (eval, heads)
BatchTokensOption = Annotated[
    int | None, typer.Option(help="Batch budget in padded tokens (default: the config's).")
]

# --head of the commands that read one attention head (align, explain, visualize-alignment)
HeadOption = Annotated[
    int | None, typer.Option(help="Head, 1-based (default: the mean of the layer's heads).")
]

# the companions of --gold, the gold word links (align, eval)
GoldPossibleOption = Annotated[
    Path | None,
    typer.Option(
        help="Pharaoh file of possible links to add to --gold (e.g. WPT's "
        "test.possible.pharaoh next to test.sure.pharaoh)."
    ),
]
GoldFormatOption = Annotated[
    str, typer.Option(help="Format of --gold: auto (from the content), pharaoh or naacl.")
]
GoldOrderOption = Annotated[
    str,
    typer.Option(
        help="src-tgt if a gold link is (source word, target word), tgt-src if (target, "
        "source). WPT en-fr links are (English, French): src-tgt for en->fr models."
    ),
]

# a multilingual model's languages (M2M100, NLLB, mBART-50) for the commands without key=value
# overrides (score, align, explain); translate, eval and heads take data.*_lang_code=CODE
SrcLangOption = Annotated[
    str | None,
    typer.Option(
        "--src-lang",
        help="A multilingual model's source language, its code as the model's tokenizer spells "
        "it (M2M100 en, NLLB eng_Latn, mBART-50 en_XX); default: the model's own.",
    ),
]
TgtLangOption = Annotated[
    str | None,
    typer.Option(
        "--tgt-lang",
        help="A multilingual model's target language (spelt as --src-lang), forced as every "
        "output's first token; default: the model's own.",
    ),
]


def language_overrides(src_lang: str | None, tgt_lang: str | None) -> list[str]:
    """The config overrides of --src-lang and --tgt-lang: data.src_lang_code, data.tgt_lang_code."""
    codes = (("src_lang_code", src_lang), ("tgt_lang_code", tgt_lang))
    return [f"data.{key}={code}" for key, code in codes if code is not None]
