"""`attnseq heads`: how much each attention head of a transformer checkpoint matters (Michel et
al. 2019); with --prune, a checkpoint with the least important heads masked."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnseq.cli.options import (
    BatchTokensOption,
    CheckpointArgument,
    DeviceOption,
    ThreadsOption,
    apply_threads,
)
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError

if TYPE_CHECKING:
    from attnseq.cli.heads_runner import HeadsRequest

_PRUNE_BY = ("gradient", "ablation", "random")


def heads(
    checkpoint: CheckpointArgument,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Overrides of the checkpoint's config, key=value."),
    ] = None,
    split: Annotated[
        str, typer.Option(help="The split whose teacher-forced loss measures the heads.")
    ] = "valid",
    max_batches: Annotated[
        int | None, typer.Option(help="Use only the first N batches of the split.")
    ] = None,
    batch_size: BatchTokensOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    report_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of CHECKPOINT.SPLIT.json and .png (default: heads/ beside the checkpoint)."
        ),
    ] = None,
    prune: Annotated[
        str | None,
        typer.Option(
            help="Mask K heads (an integer) or a FRACTION in (0, 1) of all heads, lowest "
            "importance first; every attention sublayer keeps at least one head. Needs --out."
        ),
    ] = None,
    by: Annotated[
        str, typer.Option(help="What --prune ranks by: gradient, ablation or random.")
    ] = "gradient",
    seed: Annotated[int, typer.Option(help="Seed of --by random.")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Where --prune writes the pruned checkpoint.")
    ] = None,
) -> None:
    """Head importance of a transformer (Michel et al. 2019): the expected |dL/dxi_h| of each
    head's mask (normalized per layer) and the loss increase when the head alone is masked,
    per layer of encoder self-, decoder self- and cross-attention.

    \b
    attnseq heads RUN/checkpoints/best.pt  # tables, heads/best.valid.{json,png}
    attnseq heads best.pt --split test --max-batches 20
    attnseq heads best.pt --prune 0.3 --by ablation --out pruned.pt
    attnseq eval pruned.pt                 # as usual; says which heads are off
    """
    from attnseq.cli.heads_runner import HeadsRequest, run_heads

    with user_errors():
        _check_options(max_batches, batch_size, prune, by, out)
        request = HeadsRequest(
            checkpoint,
            split,
            max_batches,
            batch_size,
            device,
            report_dir,
            prune,
            by,
            seed,
            out,
            list(overrides or []),
        )
        _check_outputs(request)
        apply_threads(threads, request.overrides)
        result = run_heads(request)
    _print_result(result)


def _check_options(
    max_batches: int | None, batch_size: int | None, prune: str | None, by: str, out: Path | None
) -> None:
    """The option errors that need no checkpoint."""
    if max_batches is not None and max_batches < 1:
        raise UserError(f"--max-batches must be at least 1, got {max_batches}")
    if batch_size is not None and batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (padded tokens), got {batch_size}")
    if by not in _PRUNE_BY:
        raise UserError(f"--by must be one of {', '.join(_PRUNE_BY)}, got {by!r}")
    if (prune is None) != (out is None):
        raise UserError("--prune and --out go together: --prune K|FRACTION --out PRUNED.pt")


def _check_outputs(request: "HeadsRequest") -> None:
    """UserError for an output that cannot be written or would replace the checkpoint: the
    pruned checkpoint (--out), the report's folder and its JSON file and figure."""
    from attnseq.cli.heads_runner import report_folder, report_paths
    from attnseq.io.user_paths import (
        check_output_file,
        check_output_folder,
        refuse_output_over_inputs,
    )

    inputs = [("CHECKPOINT", request.checkpoint)]
    folder = report_folder(request)
    refuse_output_over_inputs(folder, "--report-dir", inputs)
    check_output_folder(folder, "--report-dir")
    for path in report_paths(request):
        refuse_output_over_inputs(path, "--report-dir", inputs)
    if request.out is not None:
        refuse_output_over_inputs(request.out, "--out", inputs)
        check_output_file(request.out, "--out")


def _print_result(result) -> None:  # type: ignore[no-untyped-def]
    """The tables, the files and the pruned heads."""
    from rich.console import Console

    from attnseq.analysis.head_importance import importance_tables

    console = Console()
    importance = result.importance
    console.print(
        f"{importance.split}: {importance.batches} batches, {importance.tokens} target tokens, "
        f"loss {importance.base_loss:.4f}"
    )
    for table in importance_tables(importance):
        console.print(table)
    typer.echo(f"wrote {result.json_path} and {result.figure_path}")
    if result.pruned_path is not None:
        heads = ", ".join(f"{kind} L{layer + 1} h{head + 1}" for kind, layer, head in result.pruned)
        typer.echo(f"pruned {len(result.pruned)} heads ({heads}): {result.pruned_path}")
