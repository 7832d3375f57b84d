"""`attnseq translate`: one output line per input line, from stdin or a file to stdout or a file;
interactive at a terminal."""

import contextlib
import io
import sys
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from attnseq.cli import decoding_options
from attnseq.cli.options import CheckpointArgument, DeviceOption, ThreadsOption, apply_threads
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError
from attnseq.io.user_paths import decoded_lines


class Engine(Enum):
    """What `attnseq translate` decodes with."""

    attnseq = "attnseq"
    ctranslate2 = "ctranslate2"


@decoding_options.with_decoding_flags
def translate(
    checkpoint: CheckpointArgument,
    overrides: decoding_options.OverridesArgument = None,
    decoding: decoding_options.DecodingFlags = decoding_options.CHECKPOINT_SETTINGS,
    input_file: Annotated[
        Path | None, typer.Option("--input", "-i", help="Input text, one source per line.")
    ] = None,
    output_file: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output file, written atomically (default: stdout)."),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Sentences per batch.")] = 64,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    engine: Annotated[
        Engine,
        typer.Option(
            help="attnseq: CHECKPOINT is a checkpoint; ctranslate2: CHECKPOINT is a folder "
            "written by `attnseq export --to ctranslate2`."
        ),
    ] = Engine.attnseq,
) -> None:
    """Translate (or summarize) text with a checkpoint: one output line per input line, in
    order; empty input lines give empty output lines. Reads stdin and writes stdout by default,
    streaming in chunks of 1000 lines; typed at a terminal, each line is answered as soon as
    it is entered (Ctrl-D ends). Decodes with the checkpoint's settings, its decoding.* (as
    `attnseq eval` does), unless told otherwise; with --nbest above 1 (or --num-samples), n
    lines per input in Moses n-best format: LINE ||| HYPOTHESIS ||| SCORE.

    \b
    attnseq translate best.pt < input.txt > output.txt
    echo "the 3rd of March 1998" | attnseq translate best.pt --beam 1
    attnseq translate best.pt decoding.beam=3 < input.txt
    attnseq translate best.pt --input test.de --output test.hyp.en --beam 5 \\
        --length-penalty 0.6
    attnseq translate best.pt -i test.de --beam 8 --nbest 4 > test.nbest
    attnseq translate best.pt -i test.de --sample --top-p 0.9 --num-samples 5
    attnseq translate A.pt B.pt -i test.de --beam 5   # an ensemble of two
    attnseq translate --engine ctranslate2 best-ct2/ -i test.de --beam 5
    """
    from attnseq.api.model import load
    from attnseq.decoding.translate import CHUNK_SIZE
    from attnseq.io.progress import counting

    with user_errors():
        ensemble, overrides = decoding_options.split_checkpoints(overrides)
        _check_files(input_file, output_file, [checkpoint, *ensemble])
        changes = decoding.changes()
        overrides = decoding_options.checked_overrides(overrides)
        count = apply_threads(threads, overrides)
        if engine is Engine.ctranslate2:
            if changes.get("sample") or ensemble:
                raise UserError(
                    "--engine ctranslate2 decodes one exported model with greedy or beam "
                    "search: leave out --sample and extra checkpoints"
                )
            from attnseq.decoding.ctranslate2_engine import CTranslate2Translator

            translator: Any = CTranslate2Translator(
                checkpoint, device, overrides=overrides, threads=count
            )
        else:
            model = load(checkpoint, device, overrides=overrides, ensemble=ensemble, threads=count)
            translator = model.translator
        settings = translator.settings(**changes)
        interactive = input_file is None and sys.stdin.isatty()
        if engine is not Engine.ctranslate2:  # a beam or samples no memory could hold: refused
            model.sizes.stream(settings, batch_size, 1 if interactive else CHUNK_SIZE)
        # a pipe or FIFO (`-i <(...)`) can be read once only: no count for the progress bar
        regular = input_file is not None and input_file.is_file()
        total = _count_lines(input_file) if regular and input_file is not None else None
        chunk_size = 1 if interactive else CHUNK_SIZE
        with (
            _open_input(input_file) as lines,
            counting("translate", total, enabled=not interactive) as counter,
        ):
            outputs = translator.translate(lines, settings, batch_size, chunk_size, counter)
            _write(outputs, output_file)
        if not interactive:
            typer.echo(f"translated {counter.rate.summary()}", err=True)


def _check_files(
    input_file: Path | None, output_file: Path | None, checkpoints: list[Path]
) -> None:
    """UserError for an output that cannot be written or would replace an input (the input
    text, a checkpoint, or a file of an exported model's folder), or an input that is no file."""
    if output_file is not None:
        from attnseq.io.user_paths import check_output_file, refuse_output_over_inputs

        inputs = [("--input", input_file)]
        for number, path in enumerate(checkpoints):
            option = "CHECKPOINT" if number == 0 else f"ensemble member {number + 1}"
            files = sorted(path.iterdir()) if path.is_dir() else [path]
            inputs += [(option, file) for file in files]
        refuse_output_over_inputs(output_file, "--output", inputs)
        check_output_file(output_file, "--output")
    if input_file is not None:
        from attnseq.io.user_paths import check_input_file

        check_input_file(input_file, "--input file", pipes=True)


def _count_lines(path: Path) -> int:
    """Lines of a file (the total of translate's progress bar), counted without decoding."""
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


@contextlib.contextmanager
def _open_input(path: Path | None) -> Iterator[Iterator[str]]:
    """The lines of the input file or of stdin, read the same way (`decoded_lines`)."""
    if path is None:
        yield decoded_lines(sys.stdin.buffer, "stdin")
        return
    with path.open("rb") as handle:
        yield decoded_lines(handle, str(path))


def _write(outputs: Iterable[str | list[str]], output_file: Path | None) -> None:
    """The outputs to stdout, or atomically to `output_file`."""
    if output_file is None:
        _write_outputs(outputs, sys.stdout)
        return
    from attnseq.io.atomic import atomic_write

    atomic_write(output_file, lambda handle: _write_binary(outputs, handle))


def _write_outputs(outputs: Iterable[str | list[str]], stream: IO[str]) -> None:
    """Write each output (a line, or a list of n-best lines); UserError if there was none."""
    count = 0
    for output in outputs:
        stream.write(
            "".join(line + "\n" for line in output) if isinstance(output, list) else output + "\n"
        )
        stream.flush()  # a caller reading a pipe sees each line as soon as it is decoded
        count += 1
    if count == 0:
        raise UserError("no input: the input has no lines to translate")


def _write_binary(outputs: Iterable[str | list[str]], handle: IO[bytes]) -> None:
    """`_write_outputs` into a binary file (what atomic_write hands out), as UTF-8."""
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="\n", write_through=True)
    try:
        _write_outputs(outputs, text)
    finally:
        text.detach()  # leave the file open: atomic_write flushes, syncs and closes it
