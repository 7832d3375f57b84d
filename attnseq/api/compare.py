"""`attnseq.compare`: `attnseq compare` from Python."""

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from attnseq.config.threads import check_threads, threads_set

if TYPE_CHECKING:
    from attnseq.analysis.comparison import Comparison
    from attnseq.analysis.seed_comparison import SeedComparison


def compare(
    systems: Sequence[str | Path],
    baseline: str | Path | None = None,
    references: str | Path | Sequence[str] | None = None,
    sources: str | Path | Sequence[str] | None = None,
    split: str = "test",
    task: str | None = None,
    seed: int = 12345,
    resamples: int = 1000,
    trials: int = 10000,
    buckets: Sequence[int] | None = None,
    device: str = "auto",
    train_references: str | Path | Sequence[str] | None = None,
    gold: str | Path | None = None,
    attention: bool = True,
    threads: int | str | None = None,
    beam: int | None = None,
    length_penalty: float | None = None,
) -> "Comparison | SeedComparison":
    """Is A better than B? `attnseq compare` from Python: the systems (hypothesis files,
    `attnseq eval` result folders, run directories or checkpoints) against `baseline` (one of
    them, by path; default the first), each metric with its 95% bootstrap interval and the
    paired bootstrap and approximate randomization p-values, the metric by length and the
    length ratios and their sentence buckets, word F-measure by training frequency, and the
    checkpoints' attention entropy (attnseq/analysis/comparison.py). `references`, `sources`
    and `train_references` (the training targets the word frequencies count; default: the
    train split of the first checkpoint's data): a file or the lines themselves; `buckets`:
    the lower length edges in words; `gold`: a file of gold (source word, reference word)
    links of the test set, for the AER of each checkpoint's attention; `attention=False`
    skips the attention pass; `threads`: torch's CPU threads while checkpoints decode, as
    `load(threads=)` takes them (your count is put back afterwards); `beam` and
    `length_penalty`: decode run directories and checkpoints with these settings, as
    `attnseq eval --beam K --length-penalty A` does, reusing its result. `resamples` and
    `trials` go up to 1,000,000, their memory checked against the available RAM.

        result = attnseq.compare(["runs/a", "runs/b"])
        result.scores["runs/b"]["bleu"].p_bootstrap, result.save_figure("by_length.png")
        attnseq.compare(["multirun/DATE/TIME"])  # a sweep folder's configurations over seeds
        result.words.scores["runs/b"][0].f_measure  # unseen words (result.words: WordTable)
    """
    from attnseq.analysis.seed_comparison import compare_paths

    if isinstance(systems, str | Path) or not isinstance(systems, Sequence):
        raise TypeError("systems must be a list of paths")

    def lines(value: object, name: str) -> Path | list[str] | None:
        if value is None:
            return None
        if isinstance(value, str | Path):
            return Path(value)
        if isinstance(value, Sequence) and all(isinstance(line, str) for line in value):
            return list(value)
        raise TypeError(f"{name} must be a path or a list of strings")

    if buckets is not None and not (
        isinstance(buckets, Sequence)
        and not isinstance(buckets, str)
        and all(isinstance(edge, int) and not isinstance(edge, bool) for edge in buckets)
    ):
        raise TypeError(f"buckets must be a list of whole numbers, got {buckets!r}")
    if beam is not None and (isinstance(beam, bool) or not isinstance(beam, int)):
        raise TypeError(f"beam must be an int, got {type(beam).__name__}")
    penalty = length_penalty
    if penalty is not None and (isinstance(penalty, bool) or not isinstance(penalty, int | float)):
        raise TypeError(f"length_penalty must be a number, got {type(penalty).__name__}")
    check_threads(threads, "threads")
    with threads_set(threads):  # the decoding of checkpoints; the caller's count comes back
        return compare_paths(
            systems,
            baseline=baseline,
            references=lines(references, "references"),
            sources=lines(sources, "sources"),
            task=task,
            split=split,
            device=device,
            seed=seed,
            resamples=resamples,
            trials=trials,
            edges=buckets,
            train_references=lines(train_references, "train_references"),
            gold=None if gold is None else Path(gold),
            attention=attention,
            decoding={"beam": beam, "length_penalty": length_penalty},
        )
