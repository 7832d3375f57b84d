"""`attnseq eval`: the metrics of a checkpoint on one split, optionally with its attention saved
and scored against gold word alignments."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnseq.cli import decoding_options
from attnseq.cli.options import (
    BatchTokensOption,
    CheckpointArgument,
    DeviceOption,
    GoldFormatOption,
    GoldOrderOption,
    GoldPossibleOption,
    ThreadsOption,
    apply_threads,
)
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError

OldGoldPath = Annotated[Path | None, typer.Option(hidden=True)]
OldGoldText = Annotated[str | None, typer.Option(hidden=True)]

if TYPE_CHECKING:
    from attnseq.alignment.forced import GoldAlignmentFiles
    from attnseq.evaluation.checkpoint_eval import EvalMetrics


@decoding_options.with_decoding_flags
def evaluate(
    checkpoint: CheckpointArgument,
    overrides: decoding_options.OverridesArgument = None,
    split: Annotated[
        str,
        typer.Option(
            help="What to evaluate: a split of the checkpoint's data (train, valid, test or "
            "another name of its data.splits) or a data file (.jsonl, .tsv or the prefix of a "
            "parallel pair, read with the checkpoint's data settings)."
        ),
    ] = "test",
    batch_size: BatchTokensOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder to keep the result in, OUT/CHECKPOINT-stepN/SPLIT.DECODING/ with "
            "metrics.json, hyps.txt, refs.txt (default: RUN/eval for RUN/checkpoints/X.pt, "
            "else eval/ beside the checkpoint)."
        ),
    ] = None,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    decoding: decoding_options.DecodingFlags = decoding_options.CHECKPOINT_SETTINGS,
    save_attention: Annotated[
        bool,
        typer.Option(
            help="Also save the cross-attention of every output hypothesis (every layer and "
            "head) with its source and output tokens: attention.npz beside metrics.json, for "
            "`visualize-alignment --from-saved`."
        ),
    ] = False,
    gold: Annotated[
        Path | None,
        typer.Option(
            help="Gold word alignments to score the attention with (AER, precision, recall): "
            "Pharaoh (i-j sure, i?j possible, 0-based) or NAACL (sent i j S|P, 1-based); "
            "needs --gold-src and --gold-tgt."
        ),
    ] = None,
    gold_src: Annotated[
        Path | None,
        typer.Option(
            help="Source sentences of the gold alignments, one per line, words separated by spaces."
        ),
    ] = None,
    gold_tgt: Annotated[
        Path | None, typer.Option(help="Target sentences of the gold alignments.")
    ] = None,
    gold_possible: GoldPossibleOption = None,
    gold_format: GoldFormatOption = "auto",
    gold_order: GoldOrderOption = "src-tgt",
    method: Annotated[
        str,
        typer.Option(
            help="How a target word's attention row is read: attention (the step that predicts "
            "the word) or shift-att (the step whose input it is; Chen et al. 2020)."
        ),
    ] = "attention",
    # the spellings eval had before it shared align's; hidden, for scripts that use them
    alignments: OldGoldPath = None,
    align_src: OldGoldPath = None,
    align_tgt: OldGoldPath = None,
    align_possible: OldGoldPath = None,
    align_format: OldGoldText = None,
    align_order: OldGoldText = None,
    align_method: OldGoldText = None,
) -> None:
    """Evaluate a checkpoint: loss, perplexity, BLEU, chrF, exact match; optionally save the
    attention of the outputs and score it against gold word alignments. Decodes with the
    checkpoint's settings (its decoding.*) unless told otherwise. Each result is kept in a
    folder of its own, named after the checkpoint, its step, the split and the decoding
    settings (no eval replaces another's result or the run's metrics.json).

    \b
    attnseq eval RUN/checkpoints/best.pt   # RUN/eval/best-step1400/test.greedy/
    attnseq eval RUN                       # the same: a run directory's best.pt
    attnseq eval best.pt --split valid --beam 5 --length-penalty 0.6
    attnseq eval best.pt decoding.beam=5 --out elsewhere/
    attnseq eval best.pt --beam 4 --min-length 10 --no-repeat-ngram 3
    attnseq eval best.pt --save-attention  # also .../test.greedy/attention.npz
    attnseq eval best.pt --sample --temperature 0.7 --seed 1
    attnseq eval A.pt B.pt --beam 5        # an ensemble of two checkpoints
    attnseq eval best.pt --gold wpt03_enfr/test.sure.pharaoh \\
        --gold-possible wpt03_enfr/test.possible.pharaoh \\
        --gold-src wpt03_enfr/test.en --gold-tgt wpt03_enfr/test.fr \\
        [--method shift-att]
    """
    from attnseq.evaluation.checkpoint_eval import eval_inputs, evaluate_checkpoint
    from attnseq.io.user_paths import (
        check_output_folder,
        check_path_name,
        refuse_output_over_inputs,
    )

    with user_errors():
        if batch_size is not None and batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (padded tokens), got {batch_size}")
        check_path_name(Path(split), "--split")  # a split's name, or a data file
        changes = decoding.changes()
        if changes.get("num_samples", 1) != 1:
            raise UserError(
                "--num-samples: eval scores one output per input; draw several samples with "
                "translate --num-samples, or evaluate with several --seed values"
            )
        if changes.get("nbest", 1) != 1:
            raise UserError(
                "--nbest: eval scores the best output of each input; translate --nbest writes "
                "n-best lists"
            )
        ensemble, overrides = decoding_options.split_checkpoints(overrides)
        overrides = decoding_options.checked_overrides(overrides)
        overrides.append(f"trainer.threads={apply_threads(threads, overrides)}")  # metrics.json
        gold_set = _gold_alignments(
            gold or alignments,
            gold_src or align_src,
            gold_tgt or align_tgt,
            gold_possible or align_possible,
            align_format or gold_format,
            align_order or gold_order,
        )
        method = align_method or method
        if gold_set is not None:
            gold_set.method = method
        elif method != "attention":
            raise UserError("--method goes with --gold")
        if out is not None:  # the files inside it are checked once their names are known
            inputs = eval_inputs(checkpoint, split, ensemble, gold_set, "--split")
            refuse_output_over_inputs(out, "--out", inputs)
            check_output_folder(out, "--out")
        metrics = evaluate_checkpoint(
            checkpoint,  # path, split, max_tokens
            split,
            batch_size,
            out_dir=out,
            overrides=overrides,
            device_name=device,
            save_attention=save_attention,
            alignments=gold_set,
            decoding=changes,
            ensemble=ensemble,
            names={"split": "--split", "save_attention": "--save-attention"},
        )
    _print_metrics(metrics, gold_set)


# what the messages about a gold set call its fields
GOLD_OPTIONS = {
    "gold": "--gold",
    "src": "--gold-src",
    "tgt": "--gold-tgt",
    "possible": "--gold-possible",
    "gold_format": "--gold-format",
    "order": "--gold-order",
    "method": "--method",
}


def _gold_alignments(
    gold: Path | None,
    src: Path | None,
    tgt: Path | None,
    possible: Path | None,
    gold_format: str,
    order: str,
) -> "GoldAlignmentFiles | None":
    """The gold word-alignment set of --gold and its companions, or None without it;
    UserError when a companion is missing or given alone."""
    from attnseq.alignment.forced import GoldAlignmentFiles

    if gold is None:
        if src or tgt or possible:
            raise UserError("--gold-src, --gold-tgt and --gold-possible go with --gold")
        return None
    given = {"--gold-src": src, "--gold-tgt": tgt}
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise UserError(f"--gold needs {' and '.join(missing)} (the sentences)")
    assert src is not None and tgt is not None
    return GoldAlignmentFiles(gold, src, tgt, possible, gold_format, order, names=GOLD_OPTIONS)


def _print_metrics(metrics: "EvalMetrics", gold: "GoldAlignmentFiles | None") -> None:
    """The checkpoint, the decoding settings, every metric (but the per-layer attention
    diagnostics, which metrics.json keeps) and where the result went; the word-alignment scores
    as a table of their own."""
    from attnseq.alignment.diagnostics import is_per_layer_key

    record = metrics.result.record
    typer.echo(f"{'checkpoint':>24} {record['checkpoint']} (step {record['checkpoint_step']})")
    decoding = " ".join(f"{key}={value}" for key, value in record["decoding"].items())
    typer.echo(f"{'decoding':>24} {decoding}")
    if "pruned_heads" in record:
        typer.echo(f"{'pruned heads':>24} {record['pruned_heads']}")
    for key, value in sorted(metrics.items()):
        if not key.startswith("align/") and not is_per_layer_key(key):
            typer.echo(f"{key:>24} {value:.4f}")
    if "bleu_signature" in record:
        typer.echo(f"{'BLEU signature':>24} {record['bleu_signature']}")
    if gold is not None:
        from attnseq.alignment.forced import alignment_table

        scores = {k[len("align/") :]: v for k, v in metrics.items() if k.startswith("align/")}
        typer.echo(f"\nword alignment vs {gold.gold} (metrics.json: align/...):")
        typer.echo(alignment_table(scores))
    files = sorted(path.name for path in metrics.result.folder.iterdir() if path.is_file())
    typer.echo(f"wrote {metrics.result.folder}/ ({', '.join(files)})")
