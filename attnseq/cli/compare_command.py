"""`attnseq compare`: is A better than B? Metrics with 95% intervals and p-values against the
baseline, length buckets, and with --out their figure."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnseq.cli.options import ThreadsOption, apply_threads
from attnseq.cli.user_errors import user_errors
from attnseq.errors import UserError

if TYPE_CHECKING:
    from attnseq.analysis.comparison import Comparison
    from attnseq.analysis.seed_comparison import SeedComparison


def compare(
    systems: Annotated[
        list[Path],
        typer.Argument(
            help="Two or more systems: hypothesis files (one output per line), `attnseq eval` "
            "result folders, run directories or checkpoints; or sweep folders, whose "
            "configurations are compared over their seeds."
        ),
    ],
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="The system the others are tested against (default: the first); with sweep "
            "folders, a group's name (e.g. model.attention.score=general) or a run's path."
        ),
    ] = None,
    split: Annotated[
        str, typer.Option(help="Split decoded for run directories and checkpoints.")
    ] = "test",
    src: Annotated[
        Path | None,
        typer.Option(help="Source file, one line per reference: buckets by source length."),
    ] = None,
    ref: Annotated[
        Path | None,
        typer.Option(help="Reference file (default: the refs.txt of an eval result folder)."),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(
            help="translation (BLEU, chrF, TER, exact match) or summarization (ROUGE-1/2/L, "
            "exact match); default: the eval results', else translation."
        ),
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="text, markdown, latex or json, on stdout.")
    ] = "text",
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for the figure (compare.png) and the JSON (compare.json)."),
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Seed of the resampling, 1 to 4294967295 (2**32 - 1).")
    ] = 12345,
    resamples: Annotated[
        int,
        typer.Option(
            help="Bootstrap resamples, 1 to 1000000 (sacreBLEU's default: 1000); their memory "
            "is checked against the available RAM before the tests."
        ),
    ] = 1000,
    trials: Annotated[
        int, typer.Option(help="Approximate randomization trials, 1 to 1000000.")
    ] = 10000,
    buckets: Annotated[
        str | None,
        typer.Option(
            help="Lower edges of the length buckets in words, e.g. 0,10,20,30 "
            "(default: the length quartiles)."
        ),
    ] = None,
    device: Annotated[
        str, typer.Option(help="Device for decoding checkpoints and reading their attention.")
    ] = "auto",
    train_ref: Annotated[
        Path | None,
        typer.Option(
            help="Training targets, one per line: the word frequencies of the word F-measure "
            "table (default: the train split of the first checkpoint's data)."
        ),
    ] = None,
    gold: Annotated[
        Path | None,
        typer.Option(
            help="Gold word links (Pharaoh or NAACL, source-reference word pairs) of the test "
            "set: the AER of each checkpoint's attention."
        ),
    ] = None,
    attention: Annotated[
        bool,
        typer.Option(
            "--attention/--no-attention",
            help="Measure the checkpoints' cross-attention (entropy; AER with --gold).",
        ),
    ] = True,
    beam: Annotated[
        int | None,
        typer.Option(
            help="Decode run directories and checkpoints with this beam, as `attnseq eval "
            "--beam` does, reusing the eval result of those settings (default: each "
            "checkpoint's decoding.beam)."
        ),
    ] = None,
    length_penalty: Annotated[
        float | None,
        typer.Option(
            help="With the beam: the length penalty alpha, as `attnseq eval "
            "--length-penalty` (default: each checkpoint's decoding.length_penalty)."
        ),
    ] = None,
    threads: ThreadsOption = None,
) -> None:
    """Compare systems on the same test set: each metric with its 95% bootstrap interval, and
    p-values of paired bootstrap resampling (Koehn 2004) and approximate randomization
    (Riezler & Maxwell 2005) against the baseline; the metric by length; the length ratio and
    its sentence buckets; word F-measure by training frequency; the checkpoints' attention.

    \b
    attnseq compare RUN_A RUN_B
    attnseq compare multirun/DATE/TIME --baseline model.attention.score=general
    attnseq compare base.txt new.txt --ref test.en --src test.de --out cmp/
    attnseq compare RUN_A/eval/best-step900/test.greedy RUN_B --format json
    attnseq compare RUN_A RUN_B --beam 5 --length-penalty 0.6
    attnseq compare RUN_A RUN_B --gold test.links --train-ref train.en
    """
    from attnseq.analysis.comparison import FORMATS, check_outputs
    from attnseq.analysis.seed_comparison import compare_paths

    with user_errors():
        if output_format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {output_format!r}")
        edges = _edges(buckets)
        files = {"--ref": ref, "--src": src, "--train-ref": train_ref, "--gold": gold}
        if out is not None:  # before the work: the folder, and no output over an input
            inputs = [("SYSTEMS", path) for path in systems] + list(files.items())
            check_outputs(out, "--out", inputs)
        apply_threads(threads)  # decoding checkpoints and reading their attention
        result = compare_paths(
            systems,
            baseline=baseline,
            references=ref,
            sources=src,
            task=task,
            split=split,
            device=device,
            seed=seed,
            resamples=resamples,
            trials=trials,
            edges=edges,
            train_references=train_ref,
            gold=gold,
            attention=attention,
            names=_NAMES,
            decoding={"beam": beam, "length_penalty": length_penalty},
        )
    _show(result, output_format, out)


def _show(result: "Comparison | SeedComparison", output_format: str, out: Path | None) -> None:
    """The tables on stdout; with `out`, the figure and the JSON in that folder."""
    typer.echo(result.render(output_format), nl=False)
    if out is not None:
        with user_errors():
            figure, record = result.save(out, "--out")
        typer.echo(f"wrote {figure} and {record}", err=output_format != "text")


# what the notes and messages of compare_paths call its arguments
_NAMES = {
    "systems": "SYSTEMS",
    "baseline": "--baseline",
    "references": "--ref",
    "sources": "--src",
    "train_references": "--train-ref",
    "gold": "--gold",
    "no_attention": "--no-attention",
    "seed": "--seed",
    "resamples": "--resamples",
    "trials": "--trials",
    "buckets": "--buckets",
    "beam": "--beam",
    "length_penalty": "--length-penalty",
}


def _edges(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--buckets must be whole numbers, comma-separated: {text!r}") from None
