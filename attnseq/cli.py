"""The `attnseq` command line (Typer). It parses arguments only, then calls into tasks.py.

A mistake the user can fix (`UserError`) ends with one message on stderr and exit status 2.
"""

import sys
from pathlib import Path
from typing import Annotated

import typer

from attnseq.errors import UserError

app = typer.Typer(
    name="attnseq",
    help=(
        "Sequence-to-sequence experiments with attention: RNN encoder-decoders with "
        "Bahdanau/Luong attention and transformers, configured with Hydra.\n\n"
        "Examples:\n\n"
        "  attnseq train                                  # default: GRU + Bahdanau on dates\n\n"
        "  attnseq train data=reverse trainer.max_steps=500\n\n"
        "  attnseq train -m data=reverse,copy seed=1,2    # Hydra multirun sweep\n\n"
        "  attnseq eval outputs/DATE/TIME/checkpoints/best.pt --split test"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(error: UserError) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(2)


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],  # --help goes to Hydra, which prints the config groups
    },
    add_help_option=False,
)
def train(ctx: typer.Context) -> None:
    """Train a model. Every argument is a Hydra override or flag (see `attnseq train --help`).

    \b
    attnseq train                                   # the embedded default, offline
    attnseq train config=reverse_rnn_luong          # configs/experiment/reverse_rnn_luong.yaml
    attnseq train config=path/to/my.yaml            # your own experiment file
    attnseq train model.hidden=256 optim.lr=3e-4    # any override
    attnseq train -m data=reverse,copy trainer.max_steps=50   # multirun sweep
    attnseq train --cfg job                         # print the composed config
    """
    from attnseq import hydra_entry

    try:
        args = hydra_entry.rewrite_config_selector(list(ctx.args))
        hydra_entry.preflight(args)
    except UserError as error:
        _fail(error)
    hydra_entry.run_hydra(args)


@app.command("eval")
def evaluate(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by `attnseq train`.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Config overrides applied to the checkpoint's config, key=value."),
    ] = None,
    split: Annotated[str, typer.Option(help="Which split to evaluate: test or valid.")] = "test",
    batch_size: Annotated[
        int | None, typer.Option(help="Batch budget in padded tokens (default: the config's).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder for metrics.json and hyps/ (default: RUN/eval).")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
) -> None:
    """Evaluate a checkpoint: loss, perplexity, BLEU, chrF, exact match.

    \b
    attnseq eval outputs/2026-11-22/10-00-00/checkpoints/best.pt
    attnseq eval best.pt --split valid --out eval_valid/
    """
    from attnseq import tasks

    try:
        metrics = tasks.evaluate_checkpoint(
            checkpoint,
            split=split,
            max_tokens=batch_size,
            out_dir=out,
            overrides=overrides or [],
            device_name=device,
        )
    except UserError as error:
        _fail(error)
    for key, value in sorted(metrics.items()):
        typer.echo(f"{key:>24} {value:.4f}")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    sys.exit(main())
