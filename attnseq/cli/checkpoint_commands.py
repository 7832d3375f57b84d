"""The commands that write a new model file from trained checkpoints: `attnseq average` and
`attnseq export`."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from attnseq.cli.options import CheckpointArgument, ThreadsOption, apply_threads
from attnseq.cli.user_errors import user_errors


class ExportTarget(Enum):
    ctranslate2 = "ctranslate2"
    huggingface = "huggingface"


class Quantization(Enum):
    int8 = "int8"
    int8_float16 = "int8_float16"
    int8_bfloat16 = "int8_bfloat16"
    float16 = "float16"
    bfloat16 = "bfloat16"


def average(
    checkpoints: Annotated[
        list[Path], typer.Argument(help="Checkpoints of one model (same config and vocabulary).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the average.")],
    force: Annotated[
        bool,
        typer.Option(
            help="Write over --out even when it holds the state of a training run (a run's "
            "last.pt or best.pt), which the average leaves out."
        ),
    ] = False,
    threads: ThreadsOption = None,
) -> None:
    """Average the weights of checkpoints of one model (Vaswani et al. 2017: the last 5-20
    checkpoints); the result keeps the first one's config and tokenizers, without optimizer
    state, for eval, translate and visualize-alignment. --out is never one of the
    checkpoints, and never a file a run resumes from unless --force says so.

    \b
    attnseq average run/checkpoints/step_*.pt --out run/checkpoints/averaged.pt
    attnseq average best.pt last.pt -o averaged.pt
    """
    from attnseq.io.checkpoint import refuse_replacing_training_state, save_checkpoint
    from attnseq.io.user_paths import check_output_file, refuse_output_over_inputs
    from attnseq.training.averaging import average_checkpoints

    with user_errors():
        refuse_output_over_inputs(out, "--out", [("CHECKPOINT", path) for path in checkpoints])
        check_output_file(out, "--out")
        if not force:
            remedy = "choose another path, or give --force to replace it"
            refuse_replacing_training_state(out, "--out", "an average", remedy)
        apply_threads(threads)
        payload = average_checkpoints(checkpoints)
        save_checkpoint(out, payload)
    typer.echo(f"averaged {len(checkpoints)} checkpoints into {out}")


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
        typer.Option(help="CTranslate2: store the weights quantized (default: float32)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            help="Replace the files of an earlier export in OUT_DIR (its other files stay)."
        ),
    ] = False,
) -> None:
    """Export a transformer checkpoint to CTranslate2 (the engine's model files with the
    tokenizers beside them, for `attnseq translate --engine ctranslate2 OUT_DIR`) or to a
    Hugging Face folder of the family it came from: BART for a model read from BART (for
    BartForConditionalGeneration.from_pretrained), else Marian (for
    MarianMTModel.from_pretrained and pipeline("translation")).

    \b
    attnseq export best.pt --to ctranslate2 best-ct2/
    attnseq export best.pt --to ctranslate2 best-ct2-int8/ --quantize int8
    attnseq translate --engine ctranslate2 best-ct2/ < test.de > test.hyp.en
    attnseq export hf:Helsinki-NLP/opus-mt-de-en --to huggingface opus-mt-de-en/
    attnseq export bart-run/checkpoints/best.pt --to huggingface bart-dialogsum/
    """
    from attnseq.errors import UserError
    from attnseq.models import ctranslate2_export, huggingface_export

    with user_errors():
        if to is ExportTarget.huggingface:
            if quantize is not None:
                raise UserError(
                    "--quantize is for --to ctranslate2; a Hugging Face export is float32"
                )
            marker = huggingface_export.EXPORT_FILE
            # in this command's words
            ctranslate2_export.check_export_folder(checkpoint, out_dir, force, "--force", marker)
            written = huggingface_export.export_huggingface(checkpoint, out_dir, force=force)
        else:
            ctranslate2_export.check_export_folder(checkpoint, out_dir, force, "--force")
            written = ctranslate2_export.export_ctranslate2(
                checkpoint, out_dir, quantize.value if quantize else None, force=force
            )
    typer.echo(f"exported {checkpoint} to {written} ({to.value})", err=True)
