"""`attnseq score`: the log-probability a checkpoint gives each (source, target) pair, by
teacher forcing: LOG_PROB, MEAN and TOKENS per line, streamed."""

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated

import typer

from attnseq.cli.options import (
    CheckpointArgument,
    DeviceOption,
    SrcLangOption,
    TgtLangOption,
    ThreadsOption,
    apply_threads,
    language_overrides,
)
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError
from attnseq.io.user_paths import decoded_lines


def score(
    checkpoint: CheckpointArgument,
    src: Annotated[Path, typer.Option("--src", help="Source sentences, one per line.")],
    tgt: Annotated[
        Path, typer.Option("--tgt", help="Target sentences to score, one per source line.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output file, written atomically (default: stdout)."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(help="Most pairs per batch (default: as many as --max-tokens allows)."),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Batch budget in padded tokens (default: the checkpoint's)."),
    ] = None,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Score given targets: per pair, the log-probability of the target (EOS included) under
    the model, like marian-scorer or fairseq's --score-reference. Output lines are
    LOG_PROB<TAB>MEAN<TAB>TOKENS, in input order; an empty target is scored as </s> alone, a
    pair with an empty source is not scored (nan<TAB>nan<TAB>0).

    \b
    attnseq score best.pt --src test.de --tgt test.en > test.scores
    attnseq score best.pt --src test.de --tgt test.en --out test.scores \\
        --batch-size 32
    """
    from attnseq.api.model import load
    from attnseq.evaluation.scoring import RunningSummary

    with user_errors():
        check_pairs(src, tgt)
        if out is not None:
            from attnseq.io.user_paths import check_output_file, refuse_output_over_inputs

            inputs = [("CHECKPOINT", checkpoint), ("--src", src), ("--tgt", tgt)]
            refuse_output_over_inputs(out, "--out", inputs)
            check_output_file(out, "--out")
        languages = language_overrides(src_lang, tgt_lang)
        scorer = load(checkpoint, device, overrides=languages, threads=apply_threads(threads))
        scorer = scorer.scorer
        running = RunningSummary()

        def write(handle: IO[bytes]) -> None:
            scores = scorer.score_stream(read_pairs(src, tgt), max_tokens, batch_size)
            for pair_score in scores:
                running.add(pair_score)
                handle.write((pair_score.line() + "\n").encode("utf-8"))

        if out is None:
            write(stdout_bytes())
        else:
            from attnseq.io.atomic import atomic_write

            atomic_write(out, write)
        typer.echo(running.summary().describe(), err=True)


def stdout_bytes() -> IO[bytes]:
    """Standard output as bytes (typer's testing runner replaces sys.stdout, so look it up)."""
    import sys

    return sys.stdout.buffer


def count_lines(path: Path) -> int:
    """Lines of a file as `decoded_lines` splits it (a last line without "\n" counts)."""
    lines, last = 0, b"\n"
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def check_pairs(src: Path, tgt: Path) -> None:
    """UserError for a file that is missing, not regular or empty, or files of different
    line counts."""
    from attnseq.io.user_paths import check_input_file

    counts = []
    for option, path in (("--src", src), ("--tgt", tgt)):
        check_input_file(path, f"{option} file")
        counts.append(count_lines(path))
    if counts[0] != counts[1]:
        raise UserError(
            f"--src has {counts[0]} lines but --tgt has {counts[1]}: "
            "need one target line per source line"
        )


def read_pairs(src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    """The (source, target) lines of two files checked by `check_pairs`, read lazily."""
    with src.open("rb") as sources, tgt.open("rb") as targets:
        src_lines = decoded_lines(sources, str(src))
        yield from zip(src_lines, decoded_lines(targets, str(tgt)), strict=True)
