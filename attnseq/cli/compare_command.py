"""`attnseq compare`: is A better than B? Metrics with 95% intervals and p-values against the
baseline, length buckets, and with --out their figure."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnseq.cli.options import ThreadsOption, apply_threads, at_least_one
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
    seed: Annotated[int, typer.Option(help="Seed of the resampling (>= 1).")] = 12345,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 1000,
    trials: Annotated[int, typer.Option(help="Approximate randomization trials.")] = 10000,
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
    attnseq compare RUN_A RUN_B --gold test.links --train-ref train.en
    """
    from attnseq.analysis.comparison import FORMATS, read_lines
    from attnseq.analysis.seed_comparison import compare_paths

    with user_errors():
        if output_format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {output_format!r}")
        edges = _edges(buckets)
        if out is not None and out.exists() and not out.is_dir():
            raise UserError(f"--out {out}: a file, not a folder")  # before the work
        seed = at_least_one(seed, "--seed")
        resamples = at_least_one(resamples, "--resamples")
        trials = at_least_one(trials, "--trials")
        apply_threads(threads)  # decoding checkpoints and reading their attention
        result = compare_paths(
            systems,
            baseline=baseline,
            references=read_lines(ref, "--ref") if ref is not None else None,
            sources=read_lines(src, "--src") if src is not None else None,
            task=task,
            split=split,
            device=device,
            seed=seed,
            resamples=resamples,
            trials=trials,
            edges=edges,
            train_references=read_lines(train_ref, "--train-ref")
            if train_ref is not None
            else None,
            gold=gold,
            attention=attention,
            names=_NAMES,
        )
    _show(result, output_format, out)


def _show(result: "Comparison | SeedComparison", output_format: str, out: Path | None) -> None:
    """The tables on stdout; with `out`, the figure and the JSON in that folder."""
    typer.echo(result.render(output_format), nl=False)
    if out is not None:
        with user_errors():
            out.mkdir(parents=True, exist_ok=True)
            figure = result.save_figure(out / "compare.png")
            (out / "compare.json").write_text(result.render("json"), encoding="utf-8")
        typer.echo(f"wrote {figure} and {out / 'compare.json'}", err=output_format != "text")


# what the notes and messages of compare_paths call its arguments
_NAMES = {
    "baseline": "--baseline",
    "sources": "--src",
    "train_references": "--train-ref",
    "gold": "--gold",
    "no_attention": "--no-attention",
}


def _edges(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--buckets must be whole numbers, comma-separated: {text!r}") from None
