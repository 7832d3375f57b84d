"""What `attnseq align` runs once its options are read (`run_align`): the links, a reverse
model's (which must translate the other way), the soft matrices, the gold scores."""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import torch

from attnseq.alignment.attribution import GRADIENT_METHODS, canonical_method, check_captum
from attnseq.alignment.eflomal_baseline import (
    align_corpora,
    check_eflomal,
    run_eflomal,
    symmetrized,
)
from attnseq.alignment.forced import AlignmentMethod, ForcedAlignments, align_sentences
from attnseq.alignment.word_links import (
    SYMMETRIZATIONS,
    alignment_error_rate,
    symmetrize,
    transpose,
)
from attnseq.cli.options import language_overrides
from attnseq.config.choices import DataSource, FileFormat
from attnseq.config.schema import DataConfig
from attnseq.data.unknown_tokens import UnknownCount, warn_unknown
from attnseq.data.word_alignments import (
    ALIGNMENT_ORDERS,
    GOLD_FORMATS,
    Alignment,
    read_gold_links,
    read_parallel_lines,
    read_text_lines,
)
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel

# what messages call the method, the layer and the head
METHOD_OPTIONS = ("--method", "--layer", "--head")
# the method that reads no model: the statistical aligner (alignment/eflomal_baseline.py)
EFLOMAL = "eflomal"


@dataclass
class AlignRequest:
    """The files and settings of one `attnseq align` run (the command's options)."""

    checkpoint: Path | None  # None with method eflomal
    src: Path
    tgt: Path
    method: AlignmentMethod = AlignmentMethod()
    reverse: Path | None = None
    symmetrization: str | None = None  # with `reverse`; default grow-diag-final-and
    gold: Path | None = None
    gold_possible: Path | None = None
    gold_format: str = "auto"
    gold_order: str = "src-tgt"
    device: str = "auto"
    batch_size: int = 64
    # a multilingual model's languages (the --reverse model's are the other way round)
    src_lang: str | None = None
    tgt_lang: str | None = None


@dataclass
class AlignResult:
    """links: (source word, target word) links per pair, after symmetrization if asked;
    forward/reverse: each model's own result (None for eflomal, which gives hard links only);
    scores: AER, precision, recall and the corpus counts against the gold
    (word_links.alignment_error_rate), None without gold; label: what produced the links."""

    links: list[Alignment]
    forward: ForcedAlignments | None
    reverse: ForcedAlignments | None
    scores: dict[str, float] | None
    label: str


def check_request(request: AlignRequest) -> None:
    """UserError for option values that cannot work, before any file is read."""
    if request.method.name == EFLOMAL:
        _check_eflomal_request(request)
    elif request.checkpoint is None:
        raise UserError(f"give a CHECKPOINT to align with, or --method {EFLOMAL} to align without")
    elif canonical_method(request.method.name, "--method") in GRADIENT_METHODS:
        check_captum()
    eflomal = request.method.name == EFLOMAL
    settings = request.method.settings
    for option, value in (
        ("--ig-steps", settings.ig_steps),
        ("--smoothgrad-samples", settings.smoothgrad_samples),
    ):
        if value < 1:
            raise UserError(f"{option} must be at least 1, got {value}")
    if request.symmetrization is not None and request.reverse is None and not eflomal:
        raise UserError("--symmetrize needs --reverse CHECKPOINT (a target -> source model)")
    if request.symmetrization not in (None, *SYMMETRIZATIONS):
        raise UserError(
            f"--symmetrize must be one of {', '.join(SYMMETRIZATIONS)}, "
            f"got {request.symmetrization!r}"
        )
    if request.gold is None and request.gold_possible is not None:
        raise UserError("--gold-possible goes with --gold FILE")
    if request.gold_format not in GOLD_FORMATS:
        raise UserError(f"--gold-format must be one of {', '.join(GOLD_FORMATS)}")
    if request.gold_order not in ALIGNMENT_ORDERS:
        raise UserError(f"--gold-order must be one of {', '.join(ALIGNMENT_ORDERS)}")
    if request.batch_size < 1:
        raise UserError(
            f"--batch-size must be at least 1 (sentence pairs), got {request.batch_size}"
        )


def _check_eflomal_request(request: AlignRequest) -> None:
    """The statistical aligner reads no model: no checkpoint, no model options."""
    given = [
        name
        for name, value in (
            ("CHECKPOINT", request.checkpoint),
            ("--reverse", request.reverse),
            ("--layer", request.method.layer),
            ("--head", request.method.head),
        )
        if value is not None
    ]
    if given:
        raise UserError(
            f"--method {EFLOMAL} aligns without a model: leave out {', '.join(given)} "
            "(it gives both directions itself; combine them with --symmetrize)"
        )
    check_eflomal()


def run_align(request: AlignRequest) -> AlignResult:
    """Align the pairs of `request.src`/`request.tgt` (attnseq/alignment/forced.py), combine
    them with a reverse model's (word_links.symmetrize) and score them against gold links."""
    check_request(request)
    request = replace(request, method=replace(request.method, names=METHOD_OPTIONS))
    src_lines, tgt_lines = read_parallel_lines(("--src", request.src), ("--tgt", request.tgt))
    gold = _read_gold(request, src_lines, tgt_lines)
    if request.method.name == EFLOMAL:
        links, label = _eflomal_links(request, src_lines, tgt_lines)
        scores = None if gold is None else alignment_error_rate(links, *gold)
        return AlignResult(links, None, None, scores, label)
    return _align_with_models(request, src_lines, tgt_lines, gold)


def _eflomal_links(
    request: AlignRequest, src_lines: Sequence[str], tgt_lines: Sequence[str]
) -> tuple[list[Alignment], str]:
    """eflomal's forward links of the pairs, or both directions symmetrized; and a label."""
    pairs = list(zip(src_lines, tgt_lines, strict=True))
    directions = align_corpora({"pairs": pairs}, aligner=_aligner)["pairs"]
    if request.symmetrization is None:
        return directions["forward"], "eflomal, forward"
    heuristic = request.symmetrization
    return symmetrized(directions, heuristic), f"eflomal, {heuristic} of both directions"


def _aligner(pairs: Sequence[tuple[str, str]], folder: Path) -> dict[str, list[str]]:
    """eflomal itself (a module attribute, so that tests may stand in for it)."""
    return run_eflomal(pairs, folder)


def _align_with_models(
    request: AlignRequest,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    gold: tuple[list[Alignment], list[Alignment]] | None,
) -> AlignResult:
    """The links of the checkpoint's model (symmetrized with the --reverse model's)."""
    from attnseq.config.devices import resolve_device
    from attnseq.models.loading import load_trained_model

    assert request.checkpoint is not None
    trained = load_trained_model(
        request.checkpoint, language_overrides(request.src_lang, request.tgt_lang)
    )
    counts = _unknown_counts(trained, src_lines, tgt_lines, ("--src", "--tgt"), "the model's")
    reverse_model = None
    if request.reverse is not None:
        languages = language_overrides(request.tgt_lang, request.src_lang)
        reverse_model = load_trained_model(request.reverse, languages)
        check_reverse_direction(trained, reverse_model, request.reverse)
        owner = "the --reverse model's"
        counts += _unknown_counts(reverse_model, tgt_lines, src_lines, ("--tgt", "--src"), owner)
    device = resolve_device(
        trained.cfg.trainer.device if request.device == "auto" else request.device
    )
    forward = align_sentences(
        trained, src_lines, tgt_lines, request.method, device=device, batch_size=request.batch_size
    )
    links, reverse, label = forward.links, None, forward.label
    if reverse_model is not None:
        reverse = _reverse_alignments(request, reverse_model, src_lines, tgt_lines, device)
        heuristic = request.symmetrization or "grow-diag-final-and"
        links = [
            symmetrize(f, transpose(r), heuristic)
            for f, r in zip(forward.links, reverse.links, strict=True)
        ]
        label = f"{heuristic} of ({forward.label}) and reverse ({reverse.label})"
    scores = None if gold is None else alignment_error_rate(links, *gold)
    warn_unknown(counts)  # once the alignment has worked: a failed run ends with its error only
    return AlignResult(links, forward, reverse, scores, label)


def _unknown_counts(
    trained: "TrainedModel",
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    names: tuple[str, str],
    owner: str,
) -> list[UnknownCount]:
    """The unknown tokens of the lines a model reads as its source and as its target; `names`
    are the options that gave them, `owner` whose vocabularies they are ("the model's")."""
    counts = []
    for lines, tokenizer, name, side in (
        (src_lines, trained.tokenizers.src, names[0], "source"),
        (tgt_lines, trained.tokenizers.tgt, names[1], "target"),
    ):
        count = UnknownCount(name, f"{owner} {side} vocabulary", tokenizer.unk_id)
        counts.append(count.add_all(tokenizer.encode(line) for line in lines))
    return counts


def _reverse_alignments(
    request: AlignRequest,
    reverse: "TrainedModel",
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    device: torch.device,
) -> ForcedAlignments:
    """The reverse model's alignments of the swapped pairs: links (target word, source word)."""
    try:
        return align_sentences(
            reverse,
            src_lines=tgt_lines,
            tgt_lines=src_lines,
            method=request.method,
            device=device,
            batch_size=request.batch_size,
        )
    except UserError as error:
        raise UserError(f"--reverse {request.reverse} (fed --tgt as its source): {error}") from None


def _read_gold(
    request: AlignRequest, src_lines: Sequence[str], tgt_lines: Sequence[str]
) -> tuple[list[Alignment], list[Alignment]] | None:
    """The gold (sure, possible) links as (source word, target word), or None without --gold;
    UserError for a malformed link or one outside its sentence's words."""
    if request.gold is None:
        return None
    read_text_lines(request.gold, "--gold")  # exists, is UTF-8
    if request.gold_possible is not None:
        read_text_lines(request.gold_possible, "--gold-possible")
    sure, possible = read_gold_links(
        request.gold,
        request.gold_possible,
        request.gold_format,
        request.gold_order,
        src_lines,
        tgt_lines,
        what=f"--gold {request.gold}",
        order_option="--gold-order",
    )
    if request.gold_order == "tgt-src":
        sure, possible = [transpose(s) for s in sure], [transpose(p) for p in possible]
    return sure, possible


def write_soft(path: Path, result: AlignResult) -> None:
    """The word-level matrices of `result` to an .npz file, atomically: for pair n (0-based)
    `forward_n`, float32 (target words, source words), row j how target word j's attention
    spreads over the source words (each row sums to at most 1); with a reverse model also
    `reverse_n`, float32 (source words, target words); and `method`, the method's name."""
    assert result.forward is not None  # the command refuses --soft with eflomal
    arrays: dict[str, np.ndarray] = {"method": np.array(result.label)}
    arrays.update({f"forward_{n}": matrix for n, matrix in enumerate(result.forward.soft)})
    if result.reverse is not None:
        arrays.update({f"reverse_{n}": matrix for n, matrix in enumerate(result.reverse.soft)})

    def write(handle: IO[bytes]) -> None:
        np.savez_compressed(handle, **arrays)  # type: ignore[arg-type]

    atomic_write(path, write)


# ------------------------------------------------------------------------- the reverse model
# The side names a data config has when nobody named the languages.
_PLACEHOLDERS = frozenset(
    (DataConfig.src_lang, DataConfig.tgt_lang, DataConfig.src_field, DataConfig.tgt_field)
)


def check_reverse_direction(forward: "TrainedModel", reverse: "TrainedModel", path: Path) -> None:
    """UserError when the checkpoints record that `reverse` (loaded from `path`) translates
    in the same direction as `forward`: the side names of their data configs (file suffixes
    or fields; the default "src"/"tgt" count when both read the same files) or their
    vocabularies say so. Where neither does, nothing is assumed."""
    evidence = _same_direction(forward, reverse)
    if evidence is not None:
        raise UserError(
            f"--reverse {path} translates in the same direction as the checkpoint ({evidence}); "
            "--reverse takes a target -> source model, trained on the swapped pairs"
        )


def _same_direction(forward: "TrainedModel", reverse: "TrainedModel") -> str | None:
    """What shows that both models translate the same way, or None when nothing does."""
    sides, reverse_sides = side_names(forward.cfg.data), side_names(reverse.cfg.data)
    if sides is not None and sides == reverse_sides and sides[0] != sides[1]:
        same_files = _dataset(forward.cfg.data) == _dataset(reverse.cfg.data)
        if same_files or not _PLACEHOLDERS & set(sides):
            return f"both read {sides[0]} and write {sides[1]}, by their data configs"
    tokenizers, reverse_tokenizers = forward.payload["tokenizers"], reverse.payload["tokenizers"]
    if tokenizers["src"] != tokenizers["tgt"] and tokenizers == reverse_tokenizers:
        return "both have the same source and the same target vocabulary"
    return None


def side_names(data: DataConfig) -> tuple[str, str] | None:
    """(source, target) as the data config names them, or None where it names no side:
    generated data, and the columns of TSV files (positions, not languages)."""
    if data.source is DataSource.generated:
        return None
    if data.source is DataSource.local and data.format is FileFormat.parallel:
        return data.src_lang, data.tgt_lang
    if data.source is DataSource.hub or data.format is FileFormat.jsonl:
        return data.src_field, data.tgt_field
    return None


def _dataset(data: DataConfig) -> tuple[object, ...]:
    """What identifies the files a data config reads (its sides aside)."""
    splits = tuple(sorted(data.splits.items()))
    return (data.source, data.format, data.root, data.name, splits, data.hub_name, data.hub_config)
