"""`attnseq average`: one checkpoint whose weights are the mean of several checkpoints of one
model, usable wherever a trained checkpoint is (eval, translate, visualize-alignment)."""

from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.shared import user_errors


def average(
    checkpoints: Annotated[
        list[Path], typer.Argument(help="Checkpoints of one model (same config and vocabulary).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the average.")],
) -> None:
    """Average the weights of checkpoints of one model (Vaswani et al. 2017: the last 5-20
    checkpoints); the result keeps the first one's config and tokenizers, without optimizer
    state, for eval, translate and visualize-alignment.

    \b
    attnseq average run/checkpoints/step_*.pt --out run/checkpoints/averaged.pt
    attnseq average best.pt last.pt -o averaged.pt
    """
    from attnseq.io.checkpoint import save_checkpoint
    from attnseq.io.user_paths import check_output_file, refuse_output_over_inputs
    from attnseq.training.averaging import average_checkpoints

    with user_errors():
        refuse_output_over_inputs(out, "--out", [("CHECKPOINT", path) for path in checkpoints])
        check_output_file(out, "--out")
        payload = average_checkpoints(checkpoints)
        save_checkpoint(out, payload)
    typer.echo(f"averaged {len(checkpoints)} checkpoints into {out}")
