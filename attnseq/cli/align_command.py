"""`attnseq align`: word alignments of given sentence pairs by forced decoding, in Pharaoh
format, optionally symmetrized with a reverse model and scored against gold links."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnseq.cli.options import (
    DeviceOption,
    GoldFormatOption,
    GoldOrderOption,
    GoldPossibleOption,
    HeadOption,
    SrcLangOption,
    TgtLangOption,
    ThreadsOption,
    apply_threads,
    run_directory_checkpoint,
)
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError

# The most integration points or noisy copies per target word: each is a whole forward and
# backward pass, and SmoothGrad holds every copy's noise at once; papers use tens to a few
# hundred (Sundararajan et al. 2017: 20 to 300 steps; Smilkov et al. 2017: 50 samples).
MAX_GRADIENT_PASSES = 1000

if TYPE_CHECKING:
    from attnseq.cli.align_runner import AlignResult


def align(
    checkpoint: Annotated[
        Path | None,
        typer.Argument(
            help="A checkpoint written by `attnseq train` or `attnseq average`, or a run "
            "directory (its checkpoints/best.pt); none with --method eflomal.",
            callback=run_directory_checkpoint,
            show_default=False,
        ),
    ] = None,
    src: Annotated[
        Path | None,
        typer.Option(help="Source sentences, one per line, words separated by whitespace."),
    ] = None,
    tgt: Annotated[
        Path | None, typer.Option(help="Target sentences to force, parallel to --src.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Pharaoh file to write (default: standard output).")
    ] = None,
    method: Annotated[
        str,
        typer.Option(
            help="attention (the row predicting each target word), shift-att (the row whose "
            "input is the word; Chen et al. 2020), rollout (transformers: attention through the "
            "encoder's layers), gradient-x-input, integrated-gradients or smoothgrad (alias "
            "saliency; Ding et al. 2019): what each target word owes to each source word; or "
            "eflomal, the statistical baseline (no checkpoint; the align extra): its forward "
            "links, or with --symmetrize both directions combined."
        ),
    ] = "attention",
    layer: Annotated[
        int | None,
        typer.Option(
            help="Transformer decoder layer of attention, shift-att or rollout, 1-based "
            "(default: last)."
        ),
    ] = None,
    head: HeadOption = None,
    ig_steps: Annotated[
        int,
        typer.Option(
            max=MAX_GRADIENT_PASSES,
            help="integrated-gradients: integration points per target word (at most 1000).",
        ),
    ] = 32,
    smoothgrad_samples: Annotated[
        int,
        typer.Option(
            max=MAX_GRADIENT_PASSES,
            help="smoothgrad: noisy copies of the embeddings averaged (at most 1000).",
        ),
    ] = 16,
    seed: Annotated[
        int, typer.Option(max=2**32 - 1, help="smoothgrad: seed of the noise (below 2^32).")
    ] = 0,
    reverse: Annotated[
        Path | None,
        typer.Option(help="A target -> source checkpoint whose links are combined with these."),
    ] = None,
    symmetrize: Annotated[
        str | None,
        typer.Option(
            help="With --reverse (or --method eflomal): intersect, union, grow-diag, "
            "grow-diag-final or grow-diag-final-and (the default with --reverse)."
        ),
    ] = None,
    soft: Annotated[
        Path | None,
        typer.Option(help="Also write the word-level attention matrices to this .npz file."),
    ] = None,
    gold: Annotated[
        Path | None,
        typer.Option(help="Gold links (Pharaoh i-j/i?j or NAACL): print AER, precision, recall."),
    ] = None,
    gold_possible: GoldPossibleOption = None,
    gold_format: GoldFormatOption = "auto",
    gold_order: GoldOrderOption = "src-tgt",
    batch_size: Annotated[int, typer.Option(help="Sentence pairs per forward pass.")] = 64,
    src_lang: SrcLangOption = None,
    tgt_lang: TgtLangOption = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Align words of given sentence pairs by forcing the target through the model and reading
    its cross-attention (or, with --method, another attribution of each target word to the
    source): one line of 0-based source-target links (i-j) per pair. Subword pieces are merged
    back into the whitespace-separated words of each line.

    \b
    attnseq align best.pt --src test.en --tgt test.fr > test.align
    attnseq align best.pt --src test.en --tgt test.fr --method shift-att \\
        --layer 2 --head 1
    attnseq align best.pt --src test.en --tgt test.fr \\
        --method integrated-gradients
    attnseq align en-fr.pt --src test.en --tgt test.fr --reverse fr-en.pt \\
        --symmetrize grow-diag-final-and --out test.gdfa --soft test.npz
    attnseq align best.pt --src test.en --tgt test.fr --gold test.sure.pharaoh \\
        --gold-possible test.possible.pharaoh
    attnseq align --method eflomal --src train.en --tgt train.fr \\
        --symmetrize grow-diag-final-and --out train.gdfa
    """
    from attnseq.alignment.attribution import GradientSettings
    from attnseq.alignment.forced import AlignmentMethod
    from attnseq.cli.align_runner import AlignRequest, check_request, run_align, write_soft
    from attnseq.data.word_alignments import format_pharaoh, write_pharaoh
    from attnseq.io.user_paths import check_output_file, refuse_output_over_inputs

    with user_errors():
        if src is None or tgt is None:
            raise UserError("give --src FILE and --tgt FILE (parallel sentences, one per line)")
        if soft is not None and method == "eflomal":
            raise UserError("--soft writes attention matrices; --method eflomal gives links only")
        settings = GradientSettings(ig_steps, smoothgrad_samples, seed=seed)
        request = AlignRequest(
            checkpoint=checkpoint,
            src=src,
            tgt=tgt,
            method=AlignmentMethod(name=method, layer=layer, head=head, settings=settings),
            reverse=reverse,
            symmetrization=symmetrize,
            gold=gold,
            gold_possible=gold_possible,
            gold_format=gold_format,
            gold_order=gold_order,
            device=device,
            batch_size=batch_size,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
        )
        check_request(request)
        inputs = [
            ("CHECKPOINT", checkpoint),
            ("--src", src),
            ("--tgt", tgt),
            ("--reverse", reverse),
            ("--gold", gold),
            ("--gold-possible", gold_possible),
        ]
        for option, path, suffixes in (("--out", out, None), ("--soft", soft, ["npz"])):
            if path is not None:
                refuse_output_over_inputs(path, option, inputs)
                check_output_file(path, option, suffixes)
        apply_threads(threads)
        result = run_align(request)
        if soft is not None:
            write_soft(soft, result)
        if out is not None:
            write_pharaoh(out, result.links)
        else:
            typer.echo("\n".join(format_pharaoh(links) for links in result.links))
    _report(result, out, soft, gold)


def _report(result: "AlignResult", out: Path | None, soft: Path | None, gold: Path | None) -> None:
    """What was written and the gold scores: on stdout when the links went to a file, else
    on stderr, so that standard output holds the Pharaoh lines only."""
    err = out is None
    typer.echo(f"aligned {len(result.links)} pairs: {result.label}", err=err)
    if result.scores is not None:
        s = result.scores
        typer.echo(
            f"vs {gold}: AER {s['aer']:.4f}  precision {s['precision']:.4f}  "
            f"recall {s['recall']:.4f}  ({int(s['hyp'])} links, {int(s['sure'])} sure gold)",
            err=err,
        )
    for path in (out, soft):
        if path is not None:
            typer.echo(f"wrote {path}", err=err)
