"""`attnseq export CHECKPOINT --to ctranslate2 OUT/`: a trained model converted for a fast
inference engine (models/ctranslate2_export.py)."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.shared import CheckpointArgument, user_errors


class Engine(Enum):
    """What `attnseq translate` decodes with."""

    attnseq = "attnseq"
    ctranslate2 = "ctranslate2"


class ExportTarget(Enum):
    ctranslate2 = "ctranslate2"


class Quantization(Enum):
    int8 = "int8"
    int8_float16 = "int8_float16"
    int8_bfloat16 = "int8_bfloat16"
    float16 = "float16"
    bfloat16 = "bfloat16"


def export(
    checkpoint: CheckpointArgument,
    out_dir: Annotated[
        Path, typer.Argument(help="The folder to write (new, empty, or an earlier export).")
    ],
    to: Annotated[ExportTarget, typer.Option(help="The engine to export for.")] = (
        ExportTarget.ctranslate2
    ),
    quantize: Annotated[
        Quantization | None,
        typer.Option(help="Store the weights quantized (default: float32)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            help="Replace the files of an earlier export in OUT_DIR (its other files stay)."
        ),
    ] = False,
) -> None:
    """Export a transformer checkpoint to CTranslate2: the engine's model files with the
    tokenizers beside them, for `attnseq translate --engine ctranslate2 OUT_DIR`.

    \b
    attnseq export best.pt --to ctranslate2 best-ct2/
    attnseq export best.pt --to ctranslate2 best-ct2-int8/ --quantize int8
    attnseq translate --engine ctranslate2 best-ct2/ < test.de > test.hyp.en
    """
    from attnseq.models.ctranslate2_export import export_ctranslate2

    with user_errors():
        written = export_ctranslate2(
            checkpoint, out_dir, quantize.value if quantize else None, force=force
        )
    typer.echo(f"exported {checkpoint} to {written} ({to.value})", err=True)
