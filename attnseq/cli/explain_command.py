"""`attnseq explain`: one self-contained HTML page that explains a model's output for one
source sentence."""

from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.options import (
    CheckpointArgument,
    DeviceOption,
    HeadOption,
    SrcLangOption,
    TgtLangOption,
    ThreadsOption,
    apply_threads,
    check_utf8,
    language_overrides,
)
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError


def explain(
    checkpoint: CheckpointArgument,
    src: Annotated[str | None, typer.Option(help="The source sentence to explain.")] = None,
    tgt: Annotated[
        str | None,
        typer.Option(help="A target to explain (teacher-forced); without it the model decodes."),
    ] = None,
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("explain.html"),
    beam: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Beam size; every hypothesis is explained (default: the checkpoint's "
            "decoding.beam).",
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated attribution methods to show (default: all the model has)."
        ),
    ] = None,
    layer: Annotated[
        int | None,
        typer.Option(help="Decoder layer of the attention methods, 1-based (default: last)."),
    ] = None,
    head: HeadOption = None,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Write one self-contained HTML page (no network needed) that explains the model's output
    for --src: each beam hypothesis or the forced --tgt, the source weights of every method
    for the output piece you choose, and a layer x head grid of attention maps.

    \b
    attnseq explain RUN --src "March 3rd, 1998" --out report.html
    attnseq explain best.pt --src "a b c" --tgt "c b a" \\
        --methods attention,shift-att
    attnseq explain tf.pt --src "ein Hund läuft" --beam 4 --out dog.html
    """
    from attnseq.analysis.explanation import check_request
    from attnseq.api.model import load
    from attnseq.io.user_paths import check_output_file, refuse_output_over_inputs

    with user_errors():
        if src is None:
            raise UserError("give --src TEXT: the source sentence to explain")
        if not src.strip():
            raise UserError("empty --src: give a source sentence to explain")
        if tgt is not None and not tgt.strip():
            raise UserError("empty --tgt: give a target sentence, or leave --tgt out to decode")
        check_utf8(src, "--src")
        check_utf8(tgt, "--tgt")
        chosen = _method_names(methods)
        refuse_output_over_inputs(out, "--out", [("CHECKPOINT", checkpoint)])
        check_output_file(out, "--out", ["html", "htm"])
        languages = language_overrides(src_lang, tgt_lang)
        model = load(checkpoint, device, overrides=languages, threads=apply_threads(threads))
        options = ("--methods", "--layer", "--head")  # the messages in this command's words
        check_request(model.trained, src, tgt, chosen, layer, head, options)
        model.explain(src, tgt, beam=beam, methods=chosen, layer=layer, head=head, path=out)
    typer.echo(f"wrote {out}")


def _method_names(methods: str | None) -> list[str] | None:
    """The names of a comma-separated --methods, or None for the model's every method."""
    if methods is None:
        return None
    names = [name.strip() for name in methods.split(",") if name.strip()]
    if not names:
        raise UserError("--methods names no method: give e.g. --methods attention,shift-att")
    return names
