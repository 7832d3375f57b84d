"""What `attnseq align` runs: word alignments of the sentence pairs in two files by forced
decoding (forced_alignment.py), optionally combined with a reverse model's
(symmetrize.py), saved as soft matrices, and scored against gold links.

Outputs.

- Pharaoh lines (`alignment_gold.format_pharaoh`): one line per pair, links ``i-j``, 0-based,
  i the source word and j the target word, sorted.
- Soft matrices (`write_soft`): one .npz file (numpy.load) with, for pair n (0-based),
  ``forward_n``: float32 (target words, source words), row j how target word j's attention
  spreads over the source words (each row sums to at most 1); with a reverse model also
  ``reverse_n``: float32 (source words, target words), the reverse model's rows (its target
  words are our source words); and ``method``: a string naming the method and map.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import torch

from attnseq.analysis.alignment import alignment_error_rate
from attnseq.analysis.alignment_gold import (
    GOLD_FORMATS,
    Alignment,
    LinkOutsideSentence,
    read_gold_file,
    word_counts,
)
from attnseq.analysis.forced_alignment import AlignmentMethod, ForcedAlignments, align_sentences
from attnseq.analysis.gold_sets import ALIGNMENT_ORDERS, read_parallel_lines, read_text_lines
from attnseq.analysis.reverse_model import check_reverse_direction
from attnseq.analysis.symmetrize import SYMMETRIZATIONS, symmetrize, transpose
from attnseq.data.unknown_tokens import UnknownCount, warn_unknown
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel


@dataclass
class AlignRequest:
    """The files and settings of one `attnseq align` run (the command's options)."""

    checkpoint: Path
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


@dataclass
class AlignResult:
    """links: (source word, target word) links per pair, after symmetrization if asked;
    forward/reverse: each direction's own result; scores: AER, precision, recall and the corpus
    counts against the gold (alignment.alignment_error_rate), None without gold; label: what
    produced the links."""

    links: list[Alignment]
    forward: ForcedAlignments
    reverse: ForcedAlignments | None
    scores: dict[str, float] | None
    label: str


def check_request(request: AlignRequest) -> None:
    """UserError for option values that cannot work, before any file is read."""
    if request.symmetrization is not None and request.reverse is None:
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


def run_align(request: AlignRequest) -> AlignResult:
    """Align the pairs of `request.src`/`request.tgt` (see the module docstring)."""
    from attnseq.models.loading import load_trained_model, resolve_device

    check_request(request)
    src_lines, tgt_lines = read_parallel_lines(("--src", request.src), ("--tgt", request.tgt))
    gold = _read_gold(request, src_lines, tgt_lines)
    trained = load_trained_model(request.checkpoint)
    counts = _unknown_counts(trained, src_lines, tgt_lines, ("--src", "--tgt"), "the model's")
    reverse_model = None
    if request.reverse is not None:
        reverse_model = load_trained_model(request.reverse)
        check_reverse_direction(trained, reverse_model, request.reverse)
        owner = "the --reverse model's"
        counts += _unknown_counts(reverse_model, tgt_lines, src_lines, ("--tgt", "--src"), owner)
    device = resolve_device(
        trained.cfg.trainer.device.value if request.device == "auto" else request.device
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
            reverse, tgt_lines, src_lines, request.method, device=device,
            batch_size=request.batch_size,
        )  # fmt: skip
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
    lengths, sides = word_counts(src_lines, tgt_lines, src_first=request.gold_order == "src-tgt")
    try:
        sure, possible = read_gold_file(
            request.gold,
            request.gold_possible,
            gold_format=request.gold_format,
            n_sentences=len(src_lines),
            lengths=lengths,
            sides=sides,
        )
    except LinkOutsideSentence as error:
        raise UserError(
            f"--gold {request.gold}: {error}; with --gold-order {request.gold_order} a link is "
            f"({', '.join(sides)}): is that the gold's order?"
        ) from None
    except ValueError as error:
        raise UserError(f"--gold {request.gold}: {error}") from None
    if request.gold_order == "tgt-src":
        sure, possible = [transpose(s) for s in sure], [transpose(p) for p in possible]
    return sure, possible


def write_soft(path: Path, result: AlignResult) -> None:
    """The word-level matrices of `result` to an .npz file, atomically (module docstring)."""
    arrays: dict[str, np.ndarray] = {"method": np.array(result.label)}
    arrays.update({f"forward_{n}": matrix for n, matrix in enumerate(result.forward.soft)})
    if result.reverse is not None:
        arrays.update({f"reverse_{n}": matrix for n, matrix in enumerate(result.reverse.soft)})

    def write(handle: IO[bytes]) -> None:
        np.savez_compressed(handle, **arrays)  # type: ignore[arg-type]

    atomic_write(path, write)
