"""`attnseq score`: the log-probability a checkpoint gives each given (source, target) pair,
by teacher forcing (attnseq/evaluation/scoring.py says how, and what empty lines get).

Output: one line per pair, in input order, three TAB-separated columns

    LOG_PROB <TAB> MEAN <TAB> TOKENS

the total log-probability of the target and its </s> (natural log), its mean per token, and the
number of tokens (target pieces + 1); a pair with an empty source reads `nan<TAB>nan<TAB>0`. A
summary goes to stderr: pairs, tokens, mean NLL per token and perplexity.
"""

from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.shared import CheckpointArgument, DeviceOption, decoded_lines, user_errors
from attnseq.errors import UserError


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
    device: DeviceOption = "auto",
) -> None:
    """Score given targets: per pair, the log-probability of the target (EOS included) under
    the model, like marian-scorer or fairseq's --score-reference. Output lines are
    LOG_PROB<TAB>MEAN<TAB>TOKENS, in input order; an empty target is scored as </s> alone, a
    pair with an empty source is not scored (nan<TAB>nan<TAB>0).

    \b
    attnseq score best.pt --src test.de --tgt test.en > test.scores
    attnseq score best.pt --src test.de --tgt test.en --out test.scores --batch-size 32
    """
    from attnseq.evaluation.scoring import Scorer, summarize

    with user_errors():
        pairs = read_pairs(src, tgt)
        if out is not None:
            from attnseq.io.output_paths import check_output_file

            check_output_file(out, "--out")
        scorer = Scorer.from_checkpoint(checkpoint, device)
        scores = scorer.score(pairs, max_tokens, batch_size)
        lines = [pair_score.line() for pair_score in scores]
        if out is None:
            typer.echo("\n".join(lines))
        else:
            from attnseq.io.atomic import atomic_write_lines

            atomic_write_lines(out, lines)
        typer.echo(summarize(scores).describe(), err=True)


def read_pairs(src: Path, tgt: Path) -> list[tuple[str, str]]:
    """The (source, target) lines of two files; UserError for a missing file, files of
    different line counts, or no lines at all."""
    sides = []
    for option, path in (("--src", src), ("--tgt", tgt)):
        if not path.is_file():
            raise UserError(f"{option}: file not found: {path}")
        with path.open("rb") as handle:
            sides.append(list(decoded_lines(handle, str(path))))
    sources, targets = sides
    if len(sources) != len(targets):
        raise UserError(
            f"--src has {len(sources)} lines but --tgt has {len(targets)}: "
            "need one target line per source line"
        )
    if not sources:
        raise UserError(f"no input: {src} and {tgt} have no lines to score")
    return list(zip(sources, targets, strict=True))
