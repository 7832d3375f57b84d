"""Gold word-alignment sets given on the command line (`attnseq eval --alignments`): the files
(`GoldAlignmentFiles`), read, checked and encoded for one model's tokenizers
(`load_alignment_set`), and scored with the model's attention (`LoadedAlignmentSet.score`).

A set is two sentence files (one sentence per line, words separated by whitespace) and its
links in the Pharaoh or NAACL 2003 format (alignment_gold.py), e.g. the WPT 2003
English-French set. The gold indices count whitespace-separated words, so every sentence must
tokenize into pieces that form exactly those words (`alignment.word_ids`). Every problem is a
UserError naming the file and line.
"""

from dataclasses import dataclass
from pathlib import Path

import torch

from attnseq.analysis.alignment import ALIGNMENT_SCORES
from attnseq.analysis.alignment_gold import (
    Alignment,
    LinkOutsideSentence,
    read_gold_file,
    word_counts,
)
from attnseq.analysis.forced_alignment import ALIGNMENT_METHODS, encode_sentence
from attnseq.analysis.model_alignment import AlignmentCorpus, corpus_alignment_metrics
from attnseq.data.tokenizers import Tokenizer
from attnseq.errors import UserError
from attnseq.io.user_paths import check_input_file
from attnseq.models.seq2seq import Seq2Seq

ALIGNMENT_ORDERS = ("src-tgt", "tgt-src")


@dataclass
class GoldAlignmentFiles:
    """A word-alignment test set given on the command line (`attnseq eval --alignments`).

    gold: links, Pharaoh (``i-j`` sure, ``i?j`` possible, 0-based, one line per sentence) or
        NAACL 2003 (``sentence_no i j [S|P]``, 1-based, one link per line).
    src, tgt: the sentence pairs, one per line, words separated by whitespace (the words the
        gold indices count).
    possible: Pharaoh only, a second file whose links are all possible (WPT's
        ``test.possible.pharaoh`` next to ``test.sure.pharaoh``).
    gold_format: "auto" (from the content), "pharaoh" or "naacl".
    method: how a target word's row is read, "attention" (the step that predicts the word) or
        "shift-att" (the step whose input it is; forced_alignment.py).
    order: "src-tgt" if a link is (source word, target word), "tgt-src" if (target, source):
        WPT's links are (English, French), so "src-tgt" for an en->fr model, "tgt-src" for fr->en.
    """

    gold: Path
    src: Path
    tgt: Path
    possible: Path | None = None
    gold_format: str = "auto"
    order: str = "src-tgt"
    method: str = "attention"


@dataclass
class LoadedAlignmentSet(AlignmentCorpus):
    """`GoldAlignmentFiles` read and encoded for one model's tokenizers."""

    def score(
        self,
        model: Seq2Seq,
        device: torch.device | str = "cpu",
        batch_size: int = 32,
        method: str = "attention",
    ) -> dict[str, float]:
        """AER, precision and recall of the model's teacher-forced attention, overall (the
        last layer's head average for transformers) and per layer/head
        (`model_alignment.corpus_alignment_metrics`); `method` as `GoldAlignmentFiles`."""
        try:
            return corpus_alignment_metrics(
                model,
                self,
                device=device,
                batch_size=batch_size,
                per_map_scores=ALIGNMENT_SCORES,
                shift=method == "shift-att",
            )
        except ValueError as error:  # e.g. a model without attention (score=none)
            raise UserError(f"cannot score the gold alignments: {error}") from None


def load_alignment_set(
    files: GoldAlignmentFiles,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    max_length: int | None = None,
) -> LoadedAlignmentSet:
    """Read, check and encode a gold alignment set.

    Each sentence is encoded whole (no truncation). `max_length`: the longest sequence the model
    can take (learned positions).
    """
    if files.method not in ALIGNMENT_METHODS:
        raise UserError(
            f"--align-method must be one of {', '.join(ALIGNMENT_METHODS)}, got {files.method!r}"
        )
    if files.order not in ALIGNMENT_ORDERS:
        raise UserError(
            f"--align-order must be one of {', '.join(ALIGNMENT_ORDERS)}, got {files.order!r}"
        )
    src_lines, tgt_lines = _read_sentences(files)
    examples, src_pieces, tgt_pieces = [], [], []
    for number, (src_text, tgt_text) in enumerate(zip(src_lines, tgt_lines, strict=True)):
        where = f"line {number + 1}"
        src = encode_sentence(src_tokenizer, src_text, f"{files.src} {where}", max_length)
        tgt = encode_sentence(tgt_tokenizer, tgt_text, f"{files.tgt} {where}", max_length)
        examples.append((src.ids, tgt.ids))
        src_pieces.append(src.pieces)
        tgt_pieces.append(tgt.pieces)
    sure, possible = _read_links(files, src_lines, tgt_lines)
    return LoadedAlignmentSet(
        examples,
        src_pieces,
        tgt_pieces,
        sure,
        possible,
        src_kind=type(src_tokenizer).kind,
        tgt_kind=type(tgt_tokenizer).kind,
        src_first=files.order == "src-tgt",
    )


def _read_sentences(files: GoldAlignmentFiles) -> tuple[list[str], list[str]]:
    """The parallel sentence lines, after checking that every given file exists and is UTF-8."""
    src_lines, tgt_lines = read_parallel_lines(
        ("--align-src", files.src), ("--align-tgt", files.tgt)
    )
    for option, path in (("--alignments", files.gold), ("--align-possible", files.possible)):
        if path is not None:
            read_text_lines(path, option)  # exists, is UTF-8
    return src_lines, tgt_lines


def _read_links(
    files: GoldAlignmentFiles, src_lines: list[str], tgt_lines: list[str]
) -> tuple[list[Alignment], list[Alignment]]:
    """The sure and possible links of the set; UserError naming the file and line of a
    malformed link or of one outside its sentence's words."""
    lengths, sides = word_counts(src_lines, tgt_lines, src_first=files.order == "src-tgt")
    try:
        return read_gold_file(
            files.gold,
            files.possible,
            gold_format=files.gold_format,
            n_sentences=len(src_lines),
            lengths=lengths,
            sides=sides,
        )
    except LinkOutsideSentence as error:
        raise UserError(
            f"gold alignments {files.gold}: {error}; with --align-order {files.order} a link is "
            f"({', '.join(sides)}): is that the gold's order, and are --align-src/--align-tgt "
            "the right files?"
        ) from None
    except ValueError as error:
        raise UserError(f"gold alignments {files.gold}: {error}") from None


def read_parallel_lines(
    src: tuple[str, Path], tgt: tuple[str, Path]
) -> tuple[list[str], list[str]]:
    """The lines of a source and a target file, each given as (option, path); UserError unless
    both are UTF-8 text with the same number of lines, at least one."""
    (src_option, src_path), (tgt_option, tgt_path) = src, tgt
    src_lines = read_text_lines(src_path, src_option)
    tgt_lines = read_text_lines(tgt_path, tgt_option)
    if len(src_lines) != len(tgt_lines):
        raise UserError(
            f"{src_option} {src_path} has {len(src_lines)} lines but {tgt_option} {tgt_path} "
            f"has {len(tgt_lines)}: they must be parallel, one sentence pair per line"
        )
    if not src_lines:
        raise UserError(f"{src_option} {src_path} holds no sentences")
    return src_lines, tgt_lines


def read_text_lines(path: Path, option: str) -> list[str]:
    """The lines of a UTF-8 text file; UserError naming `option` if it is not a regular file
    with something in it (`check_input_file`) or not UTF-8."""
    check_input_file(path, f"{option} file")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UserError(f"{option} {path} is not UTF-8 text ({error.reason})") from None
