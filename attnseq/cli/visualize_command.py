"""`attnseq visualize-alignment`: attention heatmaps of a trained model, or of an output's
attention that `attnseq eval --save-attention` saved."""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnseq.cli.options import (
    DeviceOption,
    HeadOption,
    ThreadsOption,
    apply_threads,
    check_utf8,
    run_directory_checkpoint,
)
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError
from attnseq.io.user_paths import (
    InputPaths,
    check_output_file,
    check_output_folder,
    image_suffixes,
    refuse_output_over_inputs,
)

if TYPE_CHECKING:
    from attnseq.analysis.alignment_view import AttentionMap
    from attnseq.api.model import Model


# what the library's messages call the figure options and the map's layer and head here
STYLE_OPTIONS = ("--figsize", "--fontsize", "--cmap")
MAP_OPTIONS = ("--layer", "--head")


@dataclass(frozen=True)
class _Drawing:
    """How each attention map becomes a figure: subword pieces merged into words or not, and
    `plot_alignment`'s keyword arguments (layer, head, all_heads, figsize, fontsize, cmap)."""

    words: bool
    options: dict[str, Any]

    def figure(self, attention: "AttentionMap", title: str | None = None) -> tuple[Any, Any]:
        """The figure of `attention` and the map it shows (merged into words if asked): what
        `plot_alignment` draws, with the options named as this command's in its messages."""
        from attnseq.analysis.alignment_view import draw, merge_words
        from attnseq.analysis.figures import style_from_options

        if self.words:
            attention = merge_words(attention)
        options = dict(self.options)
        style = style_from_options(
            options.pop("figsize"), options.pop("fontsize"), options.pop("cmap"), STYLE_OPTIONS
        )
        figure = draw(attention, title=title, style=style, names=MAP_OPTIONS, **options)
        return figure, attention


def visualize_alignment(
    checkpoint: Annotated[
        Path | None,
        typer.Argument(
            help="A checkpoint written by `attnseq train`, or a run directory (its "
            "checkpoints/best.pt); not with --from-saved.",
            callback=run_directory_checkpoint,
        ),
    ] = None,
    src: Annotated[str | None, typer.Option(help="Source sentence.")] = None,
    tgt: Annotated[
        str | None, typer.Option(help="Target to force; without it the model decodes.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Figure file (.png, .svg, .pdf); with --input, a folder."),
    ] = None,
    input_file: Annotated[
        Path | None, typer.Option("--input", help="One source per line: one figure each.")
    ] = None,
    layer: Annotated[
        int | None, typer.Option(help="Transformer layer, 1-based (default: last).")
    ] = None,
    head: HeadOption = None,
    all_heads: Annotated[bool, typer.Option(help="Grid of every layer x head.")] = False,
    words: Annotated[bool, typer.Option(help="Merge subword pieces into words.")] = False,
    kind: Annotated[
        str,
        typer.Option(
            help="cross, encoder or decoder (self-attention), or segment (hierarchical models)."
        ),
    ] = "cross",
    tensorboard: Annotated[
        Path | None, typer.Option(help="Also log the figures to this TensorBoard folder.")
    ] = None,
    device: DeviceOption = "cpu",
    threads: ThreadsOption = None,
    from_saved: Annotated[
        Path | None,
        typer.Option(
            help="Redraw from a file of `attnseq eval --save-attention` (no model, no "
            "decoding); pick the example with --index."
        ),
    ] = None,
    index: Annotated[
        int | None,
        typer.Option(help="With --from-saved: the example, 0-based (line N+1 of hyps.txt)."),
    ] = None,
    figsize: Annotated[
        str | None,
        typer.Option(help="Figure size in inches, W,H (default: from the number of tokens)."),
    ] = None,
    fontsize: Annotated[
        float, typer.Option(help="Tick label size in points (titles a little larger).")
    ] = 11.0,
    cmap: Annotated[
        str, typer.Option(help="A matplotlib colormap, e.g. viridis, magma, Blues.")
    ] = "viridis",
) -> None:
    """Draw attention heatmaps of a trained model: its own output, or a forced --tgt; or
    redraw an output's attention saved by `attnseq eval --save-attention`. Prints the output
    each figure shows.

    \b
    attnseq visualize-alignment RUN --src "March 3rd, 1998" --out a.png
    attnseq visualize-alignment best.pt --src "a b c" --tgt "c b a" --out f.svg
    attnseq visualize-alignment tf.pt --src "..." --all-heads --out heads.png
    attnseq visualize-alignment tf.pt --src "..." --kind encoder \\
        --layer 1 --head 2
    attnseq visualize-alignment best.pt --input sentences.txt --out figures/
    attnseq visualize-alignment \\
        --from-saved RUN/eval/best-step900/test.greedy/attention.npz \\
        --index 17 --out a.png
    attnseq visualize-alignment best.pt --src "..." --figsize 8,5 \\
        --fontsize 13 --cmap Blues
    """
    from attnseq.analysis.figures import style_from_options
    from attnseq.api.model import load

    with user_errors():
        check_utf8(src, "--src")
        check_utf8(tgt, "--tgt")
        style_from_options(figsize, fontsize, cmap, STYLE_OPTIONS)  # fails before any work
        options = dict(figsize=figsize, fontsize=fontsize, cmap=cmap)
        drawing = _Drawing(words, dict(layer=layer, head=head, all_heads=all_heads, **options))
        inputs = [
            ("CHECKPOINT", checkpoint),
            ("--input", input_file),
            ("--from-saved", from_saved),
        ]
        _check_out(out, input_file, tensorboard, inputs)
        if from_saved is not None or index is not None:
            extra = {"--src": src, "--tgt": tgt, "--input": input_file}
            extra = {name: value for name, value in extra.items() if value is not None}
            if kind not in ("cross", "segment"):
                extra["--kind"] = kind
            _check_saved_request(from_saved, index, checkpoint, list(extra))
            assert from_saved is not None and index is not None
            _redraw_saved(from_saved, index, drawing, out, tensorboard, kind)
            return
        if checkpoint is None:
            raise UserError(
                "give a CHECKPOINT (with --src TEXT or --input FILE), or --from-saved FILE "
                "--index N"
            )
        figures = _figures_to_draw(src, input_file, out)
        for _, _, figure_file in figures:  # an --out folder's files are known from --input
            refuse_output_over_inputs(figure_file, "--out", inputs)
        model = load(checkpoint, device, threads=apply_threads(threads))
        model.viewer.check_kind(kind, "--kind")  # before any drawing, in this command's words
        _draw_model_attention(model, figures, tgt, kind, drawing, tensorboard)


def _check_out(
    out: Path | None, input_file: Path | None, tensorboard: Path | None, inputs: InputPaths
) -> None:
    """UserError unless --out can be written (a folder with --input, else an image file) and
    neither it nor --tensorboard is one of the command's `inputs`."""
    for option, output in (("--out", out), ("--tensorboard", tensorboard)):
        if output is not None:
            refuse_output_over_inputs(output, option, inputs)
    if tensorboard is not None:
        check_output_folder(tensorboard, "--tensorboard")
        try:  # TensorBoard's writer encodes its folder's path as UTF-8
            str(tensorboard).encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(
                f"--tensorboard {tensorboard}: TensorBoard writes only into folders whose "
                "paths are UTF-8 text; give another folder"
            ) from None
    if out is not None and input_file is not None:
        check_output_folder(out, "--out")
    elif out is not None:
        check_output_file(out, "--out", image_suffixes())


def _check_saved_request(
    from_saved: Path | None, index: int | None, checkpoint: Path | None, extra: list[str]
) -> None:
    """UserError unless a redraw names its file and example and nothing that needs a model
    (`extra`: the options given that only a model can answer)."""
    if from_saved is None:
        raise UserError("--index goes with --from-saved FILE")
    if checkpoint is not None:
        raise UserError(
            "give a CHECKPOINT or --from-saved FILE, not both: --from-saved redraws "
            "saved attention without a model"
        )
    if extra:
        raise UserError(
            f"{', '.join(extra)} cannot be used with --from-saved: the file holds the "
            "cross-attention of decoded outputs"
        )
    if index is None:
        raise UserError("--from-saved needs --index N (0-based example number)")


@contextlib.contextmanager
def _tensorboard_writer(folder: Path | None) -> Iterator[Any]:
    """A TensorBoard writer into `folder` (closed at the end), or None without one."""
    if folder is None:
        yield None
        return
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as writer:
        yield writer


def _redraw_saved(
    path: Path,
    index: int,
    drawing: _Drawing,
    out: Path | None,
    tensorboard: Path | None,
    kind: str = "cross",
) -> None:
    """Example `index` of a file of `attnseq eval --save-attention`, drawn without a model."""
    from attnseq.analysis.alignment_view import saved_attention_map
    from attnseq.analysis.figures import log_heatmap, save_figure

    attention, title = saved_attention_map(path, index, kind, "--index")
    figure, attention = drawing.figure(attention, title)
    target = save_figure(figure, out or Path("alignment.png"))
    with _tensorboard_writer(tensorboard) as writer:
        if writer is not None:
            log_heatmap(writer, f"alignment/saved_{index}", figure, 0)
    typer.echo(f"hypothesis: {attention.output}")
    typer.echo(f"wrote {target}")


def _figures_to_draw(
    src: str | None, input_file: Path | None, out: Path | None
) -> list[tuple[int, str, Path]]:
    """(number, source sentence, figure file) of each figure: --src, or each non-blank line
    of --input (blank lines have nothing to draw; the numbers keep the line order)."""
    if (src is None) == (input_file is None):
        raise UserError("give exactly one of --src TEXT or --input FILE")
    if input_file is None:
        if not (src or "").strip():
            raise UserError("empty source sentence: give --src TEXT")
        return [(0, src or "", out or Path("alignment.png"))]
    from attnseq.io.user_paths import check_input_file

    check_input_file(input_file, "--input file")
    try:
        sources = input_file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UserError(f"{input_file} is not UTF-8 text ({error.reason})") from None
    if not any(line.strip() for line in sources):
        raise UserError(f"no input: {input_file} has no non-empty line")
    folder = out or Path("alignments")
    return [
        (number, source, folder / f"line_{number:04d}.png")
        for number, source in enumerate(sources)
        if source.strip()
    ]


def _draw_model_attention(
    model: "Model",
    figures: list[tuple[int, str, Path]],
    tgt: str | None,
    kind: str,
    drawing: _Drawing,
    tensorboard: Path | None,
) -> None:
    """Each of `figures` (number, source, file): the model's attention on its own output or
    on the forced target `tgt`."""
    from attnseq.analysis.figures import log_heatmap, save_figure

    shown = "hypothesis" if tgt is None else "forced target"
    with _tensorboard_writer(tensorboard) as writer:
        for number, source, target in figures:
            model.sizes.viewing(source, tgt)  # a text no memory could hold: one line
            figure, attention = drawing.figure(model.viewer.attention(source, tgt, kind))
            save_figure(figure, target)
            if writer is not None:
                log_heatmap(writer, f"alignment/{number}", figure, 0)
            typer.echo(f"{shown}: {attention.output}")
            typer.echo(f"wrote {target}")
