"""The `attnseq` command line (Typer). It parses arguments only, then calls into tasks.py.

A mistake the user can fix (`UserError`) ends with one message on stderr and exit status 2.
"""

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Annotated

import typer
from typer.core import TyperCommand

from attnseq.cli.completion import install_bash_script
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
        "  attnseq eval outputs/DATE/TIME/checkpoints/best.pt --split test --beam 5\n\n"
        "  attnseq translate best.pt < input.txt > output.txt\n\n"
        "  attnseq average ckpt_a.pt ckpt_b.pt --out averaged.pt"
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
install_bash_script()


def _print_version(value: bool) -> None:
    if value:
        from attnseq.cli.doctor import version_lines

        typer.echo("\n".join(version_lines()))
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the versions of attnseq, torch, hydra-core and Python, and exit.",
        ),
    ] = False,
) -> None:
    """Options that come before the command (the app's help text is set above)."""


def _fail(error: UserError) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(2)


def _decoding_overrides(overrides: list[str] | None, **options: int | float | None) -> list[str]:
    """`overrides` followed by the decoding options given (their trainer.* keys), so that
    both `eval` and `translate` start from the checkpoint's settings and the flags win.
    UserError for an argument that is no key=value or would change the trained model."""
    for override in overrides or []:
        key = override.split("=", 1)[0].lstrip("+~")
        if "=" not in override and not override.startswith("~"):
            raise UserError(
                f"{override!r}: arguments after the checkpoint are config overrides, key=value "
                "(e.g. trainer.beam=5); input text comes from --input or stdin"
            )
        if key.startswith("model."):
            raise UserError(
                f"{override}: model.* cannot change for a trained checkpoint (its weights are "
                "those of the model it was trained as)"
            )
    keys = {
        "beam": "beam",
        "length_penalty": "length_penalty",
        "min_length": "min_output_length",
        "no_repeat_ngram": "no_repeat_ngram",
        "coverage_penalty": "coverage_penalty",
    }
    given = [f"trainer.{keys[key]}={value}" for key, value in options.items() if value is not None]
    return [*(overrides or []), *given]


# decoding options shared by `attnseq eval` and `attnseq translate` (None: the checkpoint's)
BeamOption = Annotated[
    int | None,
    typer.Option(help="Beam size, 1 = greedy (default: the checkpoint's trainer.beam)."),
]
LengthPenaltyOption = Annotated[
    float | None,
    typer.Option(
        help="GNMT length penalty alpha, lp = ((5+|Y|)/6)^alpha; 0 ranks by log-probability, "
        "larger values favour longer outputs (default: trainer.length_penalty)."
    ),
]
OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="Overrides of the checkpoint's config, key=value (e.g. trainer.beam=3); the "
        "decoding options (--beam, --length-penalty, ...) win over them."
    ),
]
MinLengthOption = Annotated[
    int | None,
    typer.Option(help="No EOS before this many tokens (default: trainer.min_output_length)."),
]
NoRepeatNgramOption = Annotated[
    int | None,
    typer.Option(
        help="Forbid repeating any n-gram of this size, 0 = off (default: trainer.no_repeat_ngram)."
    ),
]
CoveragePenaltyOption = Annotated[
    float | None,
    typer.Option(
        help="Beam search coverage penalty beta (Wu et al. 2016, eq. 14), 0 = off "
        "(default: trainer.coverage_penalty)."
    ),
]


class _TrainCommand(TyperCommand):
    """`attnseq train`: its arguments are Hydra overrides, completed by Hydra."""

    def shell_complete(self, ctx, incomplete):  # noqa: ANN001, ANN201  (click's signature)
        from typer.core import CompletionItem

        from attnseq.cli.completion import shell_word, train_completions

        matches = train_completions(list(ctx.args), shell_word(incomplete))
        return [CompletionItem(match) for match in matches]


@app.command(
    cls=_TrainCommand,
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
    attnseq train config=reverse_rnn_luong          # packaged experiment/reverse_rnn_luong.yaml
    attnseq train config=path/to/my.yaml            # your own experiment file
    attnseq train model.hidden=256 optim.lr=3e-4    # any override
    attnseq train -m data=reverse,copy trainer.max_steps=50   # multirun sweep
    attnseq train --cfg job                         # print the composed config
    """
    if "--version" in ctx.args:  # Hydra's own would print only Hydra's version
        _print_version(True)
    completion = _shell_completion_request(list(ctx.args))
    if completion is not None:
        from attnseq.cli.completion import shell_completion

        try:
            typer.echo(shell_completion(completion))
        except UserError as error:
            _fail(error)
        return
    from attnseq.cli import hydra_entry
    from attnseq.cli.train_help import train_help
    from attnseq.training import run_lock

    try:
        args = hydra_entry.rewrite_config_selector(list(ctx.args))
        help_text = train_help(args)
        if help_text is not None:
            typer.echo(help_text)
            return
        hydra_entry.preflight(args)
        run_lock.lock_explicit_run_dir(args)  # before Hydra writes .hydra/ and train.log
    except UserError as error:
        _fail(error)
    hydra_entry.run_hydra(args)


def _shell_completion_request(args: list[str]) -> str | None:
    """The value of Hydra's `-sc/--shell-completion` flag (`install=bash`), if given."""
    for position, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in ("-sc", "--shell-completion"):
            if equals:
                return value
            return args[position + 1] if position + 1 < len(args) else ""
    return None


@app.command()
def doctor() -> None:
    """Print what a bug report needs: versions, devices, data, Hydra plugins and cache.

    \b
    versions   attnseq, torch, hydra-core, Python, the platform
    devices    CUDA and MPS devices, torch's threads
    data       ATTNSEQ_DATA and the packaged local corpora found or missing there
    plugins    the Hydra launchers and sweepers installed
    cache      the cache folder ($ATTNSEQ_CACHE) and its size

    \b
    attnseq doctor
    ATTNSEQ_DATA=/data/corpora attnseq doctor
    """
    from attnseq.cli.doctor import format_report, report

    typer.echo(format_report(report()))


@app.command("eval")
def evaluate(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint written by `attnseq train`.")],
    overrides: OverridesArgument = None,
    split: Annotated[str, typer.Option(help="Which split to evaluate: test or valid.")] = "test",
    batch_size: Annotated[
        int | None, typer.Option(help="Batch budget in padded tokens (default: the config's).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder to keep the result in, OUT/CHECKPOINT-stepN/SPLIT.DECODING/ with "
            "metrics.json, hyps.txt, refs.txt (default: RUN/eval for RUN/checkpoints/X.pt, "
            "else eval/ beside the checkpoint)."
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    beam: BeamOption = None,
    length_penalty: LengthPenaltyOption = None,
    min_length: MinLengthOption = None,
    no_repeat_ngram: NoRepeatNgramOption = None,
    coverage_penalty: CoveragePenaltyOption = None,
    save_attention: Annotated[
        bool,
        typer.Option(
            help="Also save the cross-attention of every output hypothesis (every layer and "
            "head) with its source and output tokens: attention.npz beside metrics.json, for "
            "`visualize-alignment --from-saved`."
        ),
    ] = False,
    alignments: Annotated[
        Path | None,
        typer.Option(
            help="Gold word alignments to score the attention with (AER, precision, recall): "
            "Pharaoh (i-j sure, i?j possible, 0-based) or NAACL (sent i j S|P, 1-based); "
            "needs --align-src and --align-tgt."
        ),
    ] = None,
    align_src: Annotated[
        Path | None,
        typer.Option(
            help="Source sentences of the gold alignments, one per line, words separated by spaces."
        ),
    ] = None,
    align_tgt: Annotated[
        Path | None, typer.Option(help="Target sentences of the gold alignments.")
    ] = None,
    align_possible: Annotated[
        Path | None,
        typer.Option(
            help="Pharaoh file of possible links to add to --alignments (e.g. WPT's "
            "test.possible.pharaoh next to test.sure.pharaoh)."
        ),
    ] = None,
    align_format: Annotated[
        str, typer.Option(help="Format of --alignments: auto (from the content), pharaoh, naacl.")
    ] = "auto",
    align_order: Annotated[
        str,
        typer.Option(
            help="src-tgt if a gold link is (source word, target word), tgt-src if (target, "
            "source). WPT en-fr links are (English, French): src-tgt for en->fr models."
        ),
    ] = "src-tgt",
) -> None:
    """Evaluate a checkpoint: loss, perplexity, BLEU, chrF, exact match; optionally save the
    attention of the outputs and score it against gold word alignments. Decodes with the
    checkpoint's settings unless told otherwise. Each result is kept in a folder of its own,
    named after the checkpoint, its step, the split and the decoding settings (no eval
    replaces another's result or the run's metrics.json).

    \b
    attnseq eval RUN/checkpoints/best.pt       # RUN/eval/best-step1400/test.greedy/
    attnseq eval best.pt --split valid --beam 5 --length-penalty 0.6   # .../valid.beam5-lp0.6/
    attnseq eval best.pt trainer.beam=5 --out elsewhere/
    attnseq eval best.pt --beam 4 --min-length 10 --no-repeat-ngram 3   # summarization
    attnseq eval best.pt --save-attention      # also .../test.greedy/attention.npz
    attnseq eval best.pt --alignments wpt03_enfr/test.sure.pharaoh \\
        --align-possible wpt03_enfr/test.possible.pharaoh \\
        --align-src wpt03_enfr/test.en --align-tgt wpt03_enfr/test.fr
    """
    from attnseq.analysis.gold_sets import GoldAlignmentFiles
    from attnseq.io.output_paths import check_output_folder
    from attnseq.training import run

    try:
        if batch_size is not None and batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (padded tokens), got {batch_size}")
        if out is not None:
            check_output_folder(out, "--out")
        overrides = _decoding_overrides(
            overrides,
            beam=beam,
            length_penalty=length_penalty,
            min_length=min_length,
            no_repeat_ngram=no_repeat_ngram,
            coverage_penalty=coverage_penalty,
        )
        gold = None
        given = {"--align-src": align_src, "--align-tgt": align_tgt}
        if alignments is not None:
            missing = [name for name, value in given.items() if value is None]
            if missing:
                raise UserError(f"--alignments needs {' and '.join(missing)} (the sentences)")
            assert align_src is not None and align_tgt is not None
            gold = GoldAlignmentFiles(
                alignments, align_src, align_tgt, align_possible, align_format, align_order
            )
        elif align_src or align_tgt or align_possible:
            raise UserError("--align-src, --align-tgt and --align-possible go with --alignments")
        metrics = run.evaluate_checkpoint(
            checkpoint,
            split=split,
            max_tokens=batch_size,
            out_dir=out,
            overrides=overrides,
            device_name=device,
            save_attention=save_attention,
            alignments=gold,
        )
    except UserError as error:
        _fail(error)
    record = metrics.result.record
    typer.echo(f"{'checkpoint':>24} {record['checkpoint']} (step {record['checkpoint_step']})")
    decoding = " ".join(f"{key}={value}" for key, value in record["decoding"].items())
    typer.echo(f"{'decoding':>24} {decoding}")
    for key, value in sorted(metrics.items()):
        if not key.startswith("align/"):
            typer.echo(f"{key:>24} {value:.4f}")
    if "bleu_signature" in record:
        typer.echo(f"{'BLEU signature':>24} {record['bleu_signature']}")
    if gold is not None:
        from attnseq.analysis.model_alignment import alignment_table

        scores = {k[len("align/") :]: v for k, v in metrics.items() if k.startswith("align/")}
        typer.echo(f"\nword alignment vs {gold.gold} (metrics.json: align/...):")
        typer.echo(alignment_table(scores))
    files = sorted(path.name for path in metrics.result.folder.iterdir() if path.is_file())
    typer.echo(f"wrote {metrics.result.folder}/ ({', '.join(files)})")


@app.command()
def translate(
    checkpoint: Annotated[
        Path, typer.Argument(help="A checkpoint written by `attnseq train` or `attnseq average`.")
    ],
    overrides: OverridesArgument = None,
    beam: BeamOption = None,
    nbest: Annotated[
        int,
        typer.Option(
            help="Hypotheses per input line (<= beam); above 1, n lines per input in Moses "
            "n-best format: LINE ||| HYPOTHESIS ||| SCORE."
        ),
    ] = 1,
    length_penalty: LengthPenaltyOption = None,
    min_length: MinLengthOption = None,
    no_repeat_ngram: NoRepeatNgramOption = None,
    coverage_penalty: CoveragePenaltyOption = None,
    input_file: Annotated[
        Path | None, typer.Option("--input", "-i", help="Input text, one source per line.")
    ] = None,
    output_file: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output file, written atomically (default: stdout)."),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Sentences per batch.")] = 64,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
) -> None:
    """Translate (or summarize) text with a checkpoint: one output line per input line, in
    order; empty input lines give empty output lines. Reads stdin and writes stdout by default,
    streaming in chunks of 1000 lines. Decodes with the checkpoint's settings (as `attnseq
    eval` does) unless told otherwise.

    \b
    attnseq translate best.pt < input.txt > output.txt
    echo "the 3rd of March 1998" | attnseq translate best.pt --beam 1
    attnseq translate best.pt trainer.beam=3 < input.txt
    attnseq translate best.pt --input test.de --output test.hyp.en --beam 5 --length-penalty 0.6
    attnseq translate best.pt -i test.de --beam 8 --nbest 4 > test.nbest
    """
    from attnseq.decoding.translate import Translator
    from attnseq.io.progress import counting

    try:
        if output_file is not None:
            from attnseq.io.output_paths import check_output_file

            check_output_file(output_file, "--output")
        if input_file is not None and not input_file.exists():
            raise UserError(f"input file not found: {input_file}")
        if input_file is not None and input_file.is_dir():
            raise UserError(f"--input is a folder, not a file: {input_file}")
        overrides = _decoding_overrides(
            overrides,
            beam=beam,
            length_penalty=length_penalty,
            min_length=min_length,
            no_repeat_ngram=no_repeat_ngram,
            coverage_penalty=coverage_penalty,
        )
        translator = Translator.from_checkpoint(checkpoint, device, overrides)
        settings = translator.settings(nbest=nbest)
        # a pipe or FIFO (`-i <(...)`) can be read once only: no count for the progress bar
        regular = input_file is not None and input_file.is_file()
        total = _count_lines(input_file) if regular and input_file is not None else None
        with _open_input(input_file) as lines, counting("translate", total) as counter:
            outputs = translator.translate(lines, settings, batch_size, counter=counter)
            if output_file is None:
                _write_outputs(outputs, sys.stdout)
            else:
                from attnseq.io.atomic import atomic_write

                atomic_write(output_file, lambda handle: _write_binary(outputs, handle))
        typer.echo(f"translated {counter.rate.summary()}", err=True)
    except UserError as error:
        _fail(error)


def _count_lines(path: Path) -> int:
    """Lines of a file (the total of translate's progress bar), counted without decoding."""
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


@contextlib.contextmanager
def _open_input(path: Path | None) -> Iterator[Iterator[str]]:
    """The lines of the input file or of stdin, read the same way (`_decoded_lines`)."""
    if path is None:
        yield _decoded_lines(sys.stdin.buffer, "stdin")
        return
    with path.open("rb") as handle:
        yield _decoded_lines(handle, str(path))


def _decoded_lines(handle: IO[bytes], name: str) -> Iterator[str]:
    """Lines split at "\n" only (a CRLF ending loses its "\r"; a lone "\r" stays inside its
    line), each decoded as UTF-8; UserError naming the line that is not."""
    for number, raw in enumerate(handle, 1):
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(
                f"{name}: line {number} is not UTF-8 text ({error.reason} at byte {error.start})"
            ) from None


def _write_outputs(outputs: Iterable[str | list[str]], stream: IO[str]) -> None:
    """Write each output (a line, or a list of n-best lines); UserError if there was none."""
    count = 0
    for output in outputs:
        stream.write(
            "".join(line + "\n" for line in output) if isinstance(output, list) else output + "\n"
        )
        stream.flush()  # a caller reading a pipe sees each line as soon as it is decoded
        count += 1
    if count == 0:
        raise UserError("no input: the input has no lines to translate")


def _write_binary(outputs: Iterable[str | list[str]], handle: IO[bytes]) -> None:
    """`_write_outputs` into a binary file (what atomic_write hands out), as UTF-8."""
    text = io.TextIOWrapper(handle, encoding="utf-8", newline="\n", write_through=True)
    try:
        _write_outputs(outputs, text)
    finally:
        text.detach()  # leave the file open: atomic_write flushes, syncs and closes it


@app.command()
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
    from attnseq.io.output_paths import check_output_file
    from attnseq.training.averaging import average_checkpoints

    try:
        check_output_file(out, "--out")
        payload = average_checkpoints(checkpoints)
        save_checkpoint(out, payload)
    except UserError as error:
        _fail(error)
    typer.echo(f"averaged {len(checkpoints)} checkpoints into {out}")


@app.command("visualize-alignment")
def visualize_alignment(
    checkpoint: Annotated[
        Path | None,
        typer.Argument(help="A checkpoint written by `attnseq train` (not with --from-saved)."),
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
    head: Annotated[
        int | None, typer.Option(help="Head, 1-based (default: mean of heads).")
    ] = None,
    all_heads: Annotated[bool, typer.Option(help="Grid of every layer x head.")] = False,
    words: Annotated[bool, typer.Option(help="Merge subword pieces into words.")] = False,
    kind: Annotated[
        str, typer.Option(help="cross, encoder or decoder (self-attention).")
    ] = "cross",
    tensorboard: Annotated[
        Path | None, typer.Option(help="Also log the figures to this TensorBoard folder.")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
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
    attnseq visualize-alignment RUN/checkpoints/best.pt --src "March 3rd, 1998" --out a.png
    attnseq visualize-alignment best.pt --src "a b c" --tgt "c b a" --out forced.svg
    attnseq visualize-alignment transformer.pt --src "..." --all-heads --out heads.png
    attnseq visualize-alignment transformer.pt --src "..." --kind encoder --layer 1 --head 2
    attnseq visualize-alignment best.pt --input sentences.txt --out figures/
    attnseq visualize-alignment --from-saved RUN/eval/best-step900/test.greedy/attention.npz \\
        --index 17 --out a.png
    attnseq visualize-alignment best.pt --src "..." --figsize 8,5 --fontsize 13 --cmap Blues
    """
    from attnseq.analysis.alignment_view import AlignmentViewer, draw, merge_words
    from attnseq.analysis.figures import log_heatmap, save_figure, style_from_options
    from attnseq.io.output_paths import check_output_file, check_output_folder, image_suffixes

    try:
        style = style_from_options(figsize, fontsize, cmap)
        if out is not None and input_file is not None:
            check_output_folder(out, "--out")
        elif out is not None:
            check_output_file(out, "--out", image_suffixes())
        if from_saved is not None or index is not None:
            from attnseq.analysis.alignment_view import saved_attention_map

            if from_saved is None:
                raise UserError("--index goes with --from-saved FILE")
            if checkpoint is not None:
                raise UserError(
                    "give a CHECKPOINT or --from-saved FILE, not both: --from-saved redraws "
                    "saved attention without a model"
                )
            extra = {"--src": src, "--tgt": tgt, "--input": input_file}
            extra = {name: value for name, value in extra.items() if value is not None}
            if extra or kind != "cross":
                names = ", ".join([*extra, *(["--kind"] if kind != "cross" else [])])
                raise UserError(
                    f"{names} cannot be used with --from-saved: the file holds the "
                    "cross-attention of decoded outputs"
                )
            if index is None:
                raise UserError("--from-saved needs --index N (0-based example number)")
            attention, title = saved_attention_map(from_saved, index)
            if words:
                attention = merge_words(attention)
            figure = draw(
                attention, layer=layer, head=head, all_heads=all_heads, title=title, style=style
            )
            target = save_figure(figure, out or Path("alignment.png"))
            if tensorboard is not None:
                from torch.utils.tensorboard import SummaryWriter

                with SummaryWriter(str(tensorboard)) as writer:
                    log_heatmap(writer, f"alignment/saved_{index}", figure, 0)
            typer.echo(f"hypothesis: {attention.output}")
            typer.echo(f"wrote {target}")
            return
        if checkpoint is None:
            raise UserError(
                "give a CHECKPOINT (with --src TEXT or --input FILE), or --from-saved FILE "
                "--index N"
            )
        if (src is None) == (input_file is None):
            raise UserError("give exactly one of --src TEXT or --input FILE")
        if input_file is not None:
            if not input_file.is_file():
                raise UserError(f"input file not found: {input_file}")
            try:
                sources = input_file.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as error:
                raise UserError(f"{input_file} is not UTF-8 text ({error.reason})") from None
            if not any(line.strip() for line in sources):
                raise UserError(f"no input: {input_file} has no non-empty line")
            folder = out or Path("alignments")
            targets = [folder / f"line_{number:04d}.png" for number in range(len(sources))]
        else:
            sources, targets = [src or ""], [out or Path("alignment.png")]
        viewer = AlignmentViewer(checkpoint, device=device)
        writer = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(str(tensorboard))
        for number, (source, target) in enumerate(zip(sources, targets, strict=True)):
            if input_file is not None and not source.strip():
                continue  # blank lines have nothing to draw; numbering keeps line order
            attention = viewer.attention(source, tgt, kind)
            if words:
                attention = merge_words(attention)
            figure = draw(attention, layer=layer, head=head, all_heads=all_heads, style=style)
            save_figure(figure, target)
            if writer is not None:
                log_heatmap(writer, f"alignment/{number}", figure, 0)
            shown = "hypothesis" if tgt is None else "forced target"
            typer.echo(f"{shown}: {attention.output}")
            typer.echo(f"wrote {target}")
        if writer is not None:
            writer.close()
    except UserError as error:
        _fail(error)


@app.command("sweep-report")
def sweep_report(
    multirun_dir: Annotated[
        Path, typer.Argument(help="A sweep folder from `attnseq train -m`: multirun/DATE/TIME.")
    ],
    metric: Annotated[
        str | None,
        typer.Option(
            help="metrics.json key to sort by (default: the sweep's optimized_metric, or "
            "test/<trainer.early_stopping_metric> that the sweeper received; else test/bleu, "
            "else the first test/* key). Lower is better for keys ending in loss, ppl or aer."
        ),
    ] = None,
    csv_file: Annotated[
        Path | None, typer.Option("--csv", help="CSV file (default: MULTIRUN_DIR/report.csv).")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Figure, .png/.svg/.pdf (default: MULTIRUN_DIR/report.png)."),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Metric columns, comma-separated (default: every test/* key); the --metric "
            "sorted by comes first."
        ),
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (rich, for a terminal), csv, markdown or latex (booktabs), on stdout.",
        ),
    ] = "table",
) -> None:
    """Table of a sweep, best first: the parameters that differ between jobs, several metrics
    and each job's wall time; jobs that differ only in their seed share a row with mean ± sd
    and n. Jobs without metrics.json are listed as failed or unfinished. Also writes a CSV
    file (one row per job) and a plot, and prints the Optuna sweeper's best trial when there
    is one.

    \b
    attnseq sweep-report multirun/2026-11-22/10-00-00
    attnseq sweep-report multirun/2026-11-22/10-00-00 --metric test/loss --csv sweep.csv
    attnseq sweep-report SWEEP --metrics test/bleu,test/chrf --format markdown > table.md
    attnseq sweep-report SWEEP --format latex > table.tex
    """
    from attnseq.analysis.sweep_report import load_report, print_report, write_csv, write_plot
    from attnseq.analysis.sweep_table import FORMATS, metric_columns, render, report_rows
    from attnseq.io.output_paths import check_output_file, image_suffixes

    csv_path = csv_file or multirun_dir / "report.csv"
    plot_path = plot or multirun_dir / "report.png"
    try:
        if output_format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {output_format!r}")
        check_output_file(csv_path, "--csv")
        check_output_file(plot_path, "--plot", image_suffixes())
        report = load_report(multirun_dir, metric)
        wanted = [name.strip() for name in metrics.split(",") if name.strip()] if metrics else None
        columns = metric_columns(report, wanted)
    except UserError as error:
        _fail(error)
    if output_format == "table":
        print_report(report, metrics=columns)
    else:
        typer.echo(render(report, report_rows(report), columns, output_format), nl=False)
    try:
        csv_path = write_csv(report, csv_path)
        plot_path = write_plot(report, plot_path)
    except UserError as error:
        _fail(error)
    # a table for a file or another program keeps stdout to itself
    typer.echo(f"wrote {csv_path} and {plot_path}", err=output_format != "table")


def _torchrun_worker() -> bool:
    """True in a process torchrun started as one of several. Torchrun always sets RANK, so
    without it the answer needs no torch (which the module that knows the rules imports)."""
    if "RANK" not in os.environ:
        return False
    from attnseq.training.distributed import env_world

    return env_world().distributed


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:2] in (["-sc"], ["--shell-completion"]):
        sys.argv.insert(1, "train")  # Hydra's hint `attnseq -sc install=bash` means train's
    if not _torchrun_worker():
        app()
        return
    # A torchrun worker leaves without interpreter finalization: after a run has finished and
    # written everything, gloo's C++ threads can still abort the process while Python tears
    # down ("terminate called without an active exception", SIGABRT; pytorch/pytorch#179291),
    # and torchrun then reports the finished job as failed. By this point every file has been
    # written atomically and closed; the streams and log handlers are flushed below.
    try:
        app()
        code = 0
    except SystemExit as stop:  # typer always ends with one
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
