"""Word alignments: links and their gold files (Pharaoh and NAACL 2003), links from attention
(piece -> word pooling, argmax or threshold), the alignment error rate and the symmetrization
of two directions. The AER of a model's own attention is forced_alignment.py's; how sharp its
attention is (entropy, end-of-source mass) attention_diagnostics.py's.

Link convention. An alignment of one sentence pair is a set of (i, j) word index pairs,
0-indexed, split into sure links S and possible links P (S ⊆ P) as the alignment error rate
needs them. Gold files fix their own order: in the WPT 2003 English-French set i is the
English word and j the French word, whichever side a model translates from. Everything built
from a model here produces **(source word, target word)** pairs by default (`src_first=True`);
pass `src_first=False` to get (target, source) instead, e.g. to score a French -> English model
against the WPT files. The toy tasks of attnseq/data/generated.py give (source, target) links.

From attention to words. A model attends over pieces (characters, words, sentencepiece pieces),
the gold links words. `word_ids` maps each piece to its word, and `word_attention` pools the
(T, S) piece weights into (T_words, S_words):

    W[a, b] = 1/|P_a| * sum_{t in P_a} sum_{s in Q_b} w[t, s]

with P_a the target pieces of target word a and Q_b the source pieces of source word b. Summing
over a source word's pieces gives the probability mass the word receives (a word split into many
pieces is not penalised); averaging over a target word's pieces keeps each row a distribution, in
which every piece of the word has an equal say. Hard links then come from the argmax of each row
(`argmax_alignment`: one link per target word, as in Bahdanau et al. 2015's alignment figures and
the attention-AER evaluation of Garg et al. 2019, "Jointly Learning to Align and Translate with
Transformer Models", EMNLP) or from a threshold (`threshold_alignment`).

Alignment error rate (Och & Ney 2003, "A Systematic Comparison of Various Statistical Alignment
Models", Computational Linguistics 29(1), section 5), with A the hypothesis links, S the sure and
P the possible gold links (S ⊆ P), each summed over the whole corpus:

    precision = |A ∩ P| / |A|,   recall = |A ∩ S| / |S|,
    AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Gold files.

- Pharaoh (Koehn's format, used by the Pharaoh/Moses toolkits and `fast_align`): one line per
  sentence, whitespace-separated links ``i-j`` (sure) or ``i?j`` (possible), 0-indexed. The WPT
  set ships a sure-only file and a sure+possible file (`read_gold` combines them).
- NAACL 2003 (Mihalcea & Pedersen 2003, "An Evaluation Exercise for Word Alignment"): one link per
  line, ``sentence_no i j [S|P] [confidence]``, 1-indexed, index 0 = NULL (`read_naacl`).

`read_gold_file` reads either (`detect_gold_format` tells which from the first line with content);
`format_pharaoh` and `write_pharaoh` write Pharaoh lines (what `attnseq align` prints).

Symmetrization (`symmetrize`) of two word alignments of the same sentence pairs, one from each
direction: intersection, union and the grow-diag family of Koehn, Och & Marcu (2003),
"Statistical Phrase-Based Translation", NAACL, section 3.3, as the Moses toolkit's `symal`
implements them (moses-smt/mosesdecoder, symal/symal.cpp, `printgrow`).

Both alignments are sets of (source word, target word) links, 0-based. `forward` comes from the
source -> target direction (an attention model gives one link per target word), `reverse` from
the target -> source direction with its links already transposed to (source, target)
(`transpose`).

    intersect   A = F ∩ R                      high precision
    union       A = F ∪ R                      high recall
    grow-diag   start from F ∩ R; repeatedly add a link of F ∪ R that neighbours a link of A
                (horizontally, vertically or diagonally) and covers a word A leaves
                unaligned, until nothing changes
    grow-diag-final      grow-diag, then add each link of F ∪ R that covers a word A leaves
                unaligned (either word)
    grow-diag-final-and  grow-diag, then add each link of F ∪ R whose source word AND target word
                are both still unaligned

Order matters, since every added link covers its words for the links after it; symal's order is
kept. Links are visited sorted by (target word, source word) (symal's std::set of
(target, source) points), the neighbours of a link in symal's order: (-1, 0), (0, -1), (1, 0),
(0, 1), then the diagonals (-1, -1), (-1, 1), (1, -1), (1, 1), each as (target, source) offset.
A link that the growing pass adds after the one being scanned is scanned in the same pass (an
insertion into an ordered set behind the iterator). The final step first visits the links found
only by `forward` (symal's "inverse" alignment, one link per target word), then those found only
by `reverse`.

Shapes: T target pieces (rows: the row t predicts target piece t, the last row EOS), S source
pieces (columns; the source has no BOS/EOS), L layers, H heads, B batch.
"""

import bisect
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write_lines

Link = tuple[int, int]
Alignment = set[Link]
# per sentence: the number of words on the side a link's first index counts, and on its second
Lengths = Sequence[tuple[int, int]]

GOLD_FORMATS: tuple[str, ...] = ("auto", "pharaoh", "naacl")

_PHARAOH_LINK = re.compile(r"(\d+)([-?])(\d+)")


class LinkOutsideSentence(ValueError):
    """A gold link whose word index is beyond its sentence's words."""


def _check_inside(
    number: int,
    token: str,
    sentence: int,
    link: Link,
    lengths: Lengths | None,
    sides: tuple[str, str] | None,
) -> None:
    """LinkOutsideSentence unless both indices of `link` (0-based) fall inside sentence
    `sentence` (1-based) of `lengths`; `token` is the link as the file writes it, found on
    line `number`. Sentences beyond `lengths` are left to the sentence-count check."""
    if lengths is None or sentence > len(lengths):
        return
    n_first, n_second = lengths[sentence - 1]
    if link[0] < n_first and link[1] < n_second:
        return
    first, second = sides or ("first", "second")
    raise LinkOutsideSentence(
        f"line {number}: link {token} ({first} word, {second} word) is outside sentence "
        f"{sentence}, which has {n_first} {first} and {n_second} {second} words"
    )


def _lines(path_or_lines: str | os.PathLike[str] | Iterable[str]) -> list[str]:
    """A str or path is a file name; any other iterable yields the lines themselves."""
    if isinstance(path_or_lines, (str, os.PathLike)):
        return Path(path_or_lines).read_text(encoding="utf-8").splitlines()
    return [line.rstrip("\r\n") for line in path_or_lines]


def read_pharaoh(
    path_or_lines: str | os.PathLike[str] | Iterable[str],
    lengths: Lengths | None = None,
    sides: tuple[str, str] | None = None,
) -> tuple[list[Alignment], list[Alignment]]:
    """Read Pharaoh alignments: one line per sentence, links ``i-j`` (sure) and ``i?j`` (possible).

    Args:
        path_or_lines: a file name (str or path), or the lines themselves (e.g.
            ``text.splitlines()``). An empty line is a sentence without links.
        lengths: the word counts of each sentence (`Lengths`), to refuse a link beyond them;
            `sides` names the two sides in the message (e.g. ("source", "target")).

    Returns:
        (sure, possible): one set of (i, j) per sentence each; possible holds the sure links too
        (S ⊆ P, as AER requires), so a file of ``i-j`` links only gives possible == sure.

    Raises:
        ValueError: a token that is neither ``i-j`` nor ``i?j`` (the message gives the line);
            LinkOutsideSentence for a link beyond `lengths`.
    """
    sure: list[Alignment] = []
    possible: list[Alignment] = []
    for number, line in enumerate(_lines(path_or_lines), start=1):
        line_sure: Alignment = set()
        line_possible: Alignment = set()
        for token in line.split():
            match = _PHARAOH_LINK.fullmatch(token)
            if match is None:
                raise ValueError(
                    f"line {number}: cannot parse link {token!r}; expected i-j (sure) or "
                    "i?j (possible) with 0-indexed integers"
                )
            link = (int(match[1]), int(match[3]))
            _check_inside(number, token, number, link, lengths, sides)
            line_possible.add(link)
            if match[2] == "-":
                line_sure.add(link)
        sure.append(line_sure)
        possible.append(line_possible)
    return sure, possible


def word_counts(
    src_lines: Sequence[str], tgt_lines: Sequence[str], src_first: bool = True
) -> tuple[list[tuple[int, int]], tuple[str, str]]:
    """(lengths, sides) for the readers' link check: the whitespace-separated words of each
    sentence pair, in the order a gold link gives them ((source, target) when `src_first`,
    else (target, source)), and the names of the two sides in that order."""
    counts = [(len(s.split()), len(t.split())) for s, t in zip(src_lines, tgt_lines, strict=True)]
    if src_first:
        return counts, ("source", "target")
    return [(t, s) for s, t in counts], ("target", "source")


def format_pharaoh(links: Iterable[Link], possible: Iterable[Link] = ()) -> str:
    """One Pharaoh line: ``i-j`` for each link, ``i?j`` for each possible link that is not also
    in `links`, sorted by (i, j), separated by single spaces ("" for no link)."""
    sure = set(links)
    marked = [(link, "-") for link in sure] + [(link, "?") for link in set(possible) - sure]
    return " ".join(f"{i}{mark}{j}" for (i, j), mark in sorted(marked))


def write_pharaoh(path: str | os.PathLike[str], alignments: Sequence[Iterable[Link]]) -> None:
    """Write one `format_pharaoh` line per sentence to `path`, atomically; `read_pharaoh` reads
    the file back into the same sets."""
    atomic_write_lines(Path(path), [format_pharaoh(links) for links in alignments])


def read_gold(
    sure_path: str | os.PathLike[str] | Iterable[str],
    possible_path: str | os.PathLike[str] | Iterable[str] | None = None,
    lengths: Lengths | None = None,
    sides: tuple[str, str] | None = None,
) -> tuple[list[Alignment], list[Alignment]]:
    """Sure and possible gold links from a sure file and an optional sure+possible file.

    The WPT set ships ``test.sure.pharaoh`` (sure links) and ``test.possible.pharaoh`` (sure and
    possible links, all written ``i-j``): every link of the second file is possible, every ``i-j``
    link of the first is sure. Possible is the union of all links (so S ⊆ P always holds, even
    for a possible file that lacks some sure link). Without `possible_path`, possible = sure plus
    any ``i?j`` links of the sure file. `lengths`, `sides`: as `read_pharaoh`, for both files.

    Returns:
        (sure, possible), one set of (i, j) per sentence each.

    Raises:
        ValueError: the files have different numbers of lines, or a malformed link.
    """
    sure, possible = read_pharaoh(sure_path, lengths, sides)
    if possible_path is None:
        return sure, possible
    try:
        _, more = read_pharaoh(possible_path, lengths, sides)
    except ValueError as error:
        where = possible_path if isinstance(possible_path, str | os.PathLike) else "possible"
        raise type(error)(f"{where}: {error}") from None
    if len(more) != len(sure):
        raise ValueError(
            f"the sure file has {len(sure)} sentences but the possible file has {len(more)}"
        )
    return sure, [a | b for a, b in zip(possible, more, strict=True)]


def read_naacl(
    path_or_lines: str | os.PathLike[str] | Iterable[str],
    n_sentences: int | None = None,
    lengths: Lengths | None = None,
    sides: tuple[str, str] | None = None,
) -> tuple[list[Alignment], list[Alignment]]:
    """Read the NAACL 2003 format: ``sentence_no i j [S|P] [confidence]`` per line, 1-indexed.

    Links are converted to 0-indexed (i, j); links to NULL (index 0) are skipped; a missing
    S|P field means sure. Sentences are numbered from 1; `n_sentences` gives the length of the
    result (sentences without links have no line in the file), by default the largest number.
    `lengths`, `sides`: as `read_pharaoh` (the 0-indexed links are checked).

    Returns:
        (sure, possible) as `read_pharaoh` returns them (possible ⊇ sure).
    """
    records: list[tuple[int, Link, bool]] = []
    for number, line in enumerate(_lines(path_or_lines), start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 3 or (len(fields) > 3 and fields[3] not in ("S", "P")):
            raise ValueError(
                f"line {number}: expected 'sentence_no i j [S|P] [confidence]', got {line!r}"
            )
        try:
            sentence, i, j = (int(field) for field in fields[:3])
        except ValueError:
            raise ValueError(f"line {number}: non-integer index in {line!r}") from None
        if sentence < 1 or i < 0 or j < 0:
            raise ValueError(f"line {number}: sentence numbers start at 1, indices at 0: {line!r}")
        if i == 0 or j == 0:
            continue  # NULL link: not a word pair
        _check_inside(number, repr(line.strip()), sentence, (i - 1, j - 1), lengths, sides)
        records.append((sentence, (i - 1, j - 1), len(fields) == 3 or fields[3] == "S"))
    last = max((sentence for sentence, _, _ in records), default=0)
    count = last if n_sentences is None else n_sentences
    if last > count:
        raise ValueError(f"sentence number {last} is beyond n_sentences={count}")
    sure: list[Alignment] = [set() for _ in range(count)]
    possible: list[Alignment] = [set() for _ in range(count)]
    for sentence, link, is_sure in records:
        possible[sentence - 1].add(link)
        if is_sure:
            sure[sentence - 1].add(link)
    return sure, possible


def detect_gold_format(lines: Sequence[str]) -> str:
    """The format of gold lines, "naacl" or "pharaoh", from the first line with content.

    A NAACL line starts with three integers (``sentence_no i j``); a Pharaoh line is made of
    ``i-j``/``i?j`` links. A file without any link (all lines empty) is Pharaoh: one empty
    sentence per line.
    """
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        if len(fields) >= 3 and all(field.isdigit() for field in fields[:3]):
            return "naacl"
        return "pharaoh"
    return "pharaoh"


def read_gold_file(
    path: str | os.PathLike[str],
    possible_path: str | os.PathLike[str] | None = None,
    *,
    gold_format: str = "auto",
    n_sentences: int | None = None,
    lengths: Lengths | None = None,
    sides: tuple[str, str] | None = None,
) -> tuple[list[Alignment], list[Alignment]]:
    """Sure and possible links of a gold file in either format (`read_gold`, `read_naacl`).

    Args:
        path: Pharaoh links (one line per sentence) or a NAACL file (one link per line).
        possible_path: Pharaoh only: a second file whose links are all possible (WPT's
            ``*.possible.pharaoh``); a NAACL file marks S and P itself.
        gold_format: "pharaoh", "naacl" or "auto" (`detect_gold_format`).
        n_sentences: the number of sentences: a NAACL file has no line for a sentence
            without links; a Pharaoh file must have exactly this many lines.
        lengths, sides: the words of each sentence, to refuse links beyond them
            (`read_pharaoh`).

    Raises:
        ValueError: a malformed line, an unknown format, a possible file with NAACL, or a
            sentence count that differs from `n_sentences`; LinkOutsideSentence for a link
            beyond `lengths`.
    """
    if gold_format not in GOLD_FORMATS:
        raise ValueError(f"unknown gold format {gold_format!r}; valid: {', '.join(GOLD_FORMATS)}")
    lines = _lines(path)
    if gold_format == "auto":
        gold_format = detect_gold_format(lines)
    if gold_format == "naacl":
        if possible_path is not None:
            raise ValueError(
                "a NAACL gold file marks sure (S) and possible (P) links itself; a separate "
                "possible file goes with Pharaoh gold only"
            )
        return read_naacl(lines, n_sentences, lengths, sides)
    sure, possible = read_gold(lines, possible_path, lengths, sides)
    if n_sentences is not None and len(sure) != n_sentences:
        raise ValueError(f"{len(sure)} lines of Pharaoh links for {n_sentences} sentences")
    return sure, possible


WeightsLike = Tensor | np.ndarray

WORD_BOUNDARY = "\u2581"  # "▁", sentencepiece's marker of a piece that starts a word
PIECE_KINDS: tuple[str, ...] = ("word", "char", "sentencepiece")
ALIGNMENT_SCORES: tuple[str, ...] = ("aer", "precision", "recall")


# ----------------------------------------------------------------------- pieces -> words
def check_layer_and_head(
    layer: int | None,
    head: int | None,
    layers: int,
    heads: int,
    single: str = "",
    names: tuple[str, str] = ("--layer", "--head"),
) -> None:
    """UserError unless `layer` and `head` (the --layer/--head options, counted from 1; None:
    not given) are within the model's 1..layers and 1..heads. A model whose attention is one
    map (an RNN, a hierarchical model's segments) has layers = heads = 1, and `single` says
    so in the message (e.g. "an RNN's attention is one map"). `names`: what the message calls
    the two (the options, or a function's arguments)."""
    note = f" ({single})" if single else ""
    for option, value, count in ((names[0], layer, layers), (names[1], head, heads)):
        if value is not None and not 1 <= value <= count:
            raise UserError(f"{option} must be in 1..{count} for this model{note}, got {value}")


def word_ids(pieces: Sequence[str], kind: str) -> list[int]:
    """The word index of every piece (-1 for pieces that belong to no word).

    Args:
        pieces: the tokenizer's pieces of one text (`Tokenizer.pieces(text)`, no BOS/EOS).
        kind: "word" (one piece per word), "char" (whitespace characters separate words and
            belong to none: -1), or "sentencepiece" (a piece starting with "▁" starts a new word;
            a first piece without it starts word 0 too).

    Returns:
        len(pieces) indices; the words are numbered 0, 1, ... in order, as in the gold files.
    """
    if kind == "word":
        return list(range(len(pieces)))
    if kind == "char":
        ids: list[int] = []
        word = -1
        in_word = False
        for piece in pieces:
            if piece.isspace():
                ids.append(-1)
                in_word = False
            else:
                if not in_word:
                    word += 1
                    in_word = True
                ids.append(word)
        return ids
    if kind == "sentencepiece":
        ids = []
        word = -1
        for piece in pieces:
            if piece.startswith(WORD_BOUNDARY) or word < 0:
                word += 1
            ids.append(word)
        return ids
    raise ValueError(f"unknown piece kind {kind!r}; valid kinds: {', '.join(PIECE_KINDS)}")


def _pooling(
    ids: Sequence[int], n_positions: int, *, average: bool, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """(n_words, n_positions) matrix M with M[w, p] = 1 (or 1/|pieces of w|) if piece p is in w.

    Positions past len(ids) (EOS row, padding) and pieces with id -1 belong to no word.
    """
    if len(ids) > n_positions:
        raise ValueError(f"{len(ids)} word ids for only {n_positions} attention positions")
    index = torch.tensor(list(ids), dtype=torch.long)
    if (index < -1).any():
        raise ValueError("word ids must be >= 0, or -1 for pieces outside any word")
    n_words = int(index.max()) + 1 if len(ids) else 0
    matrix = torch.zeros(n_words, n_positions, dtype=dtype)
    positions = torch.nonzero(index >= 0).squeeze(1)
    matrix[index[positions], positions] = 1.0
    if average:
        # a word id that no piece carries leaves a zero row (clamp avoids 0/0)
        matrix = matrix / matrix.sum(dim=1, keepdim=True).clamp_min(1.0)
    return matrix.to(device)


def word_attention(
    weights: WeightsLike, src_word_ids: Sequence[int], tgt_word_ids: Sequence[int]
) -> Tensor:
    """Pool piece-level attention into word-level attention.

    W[..., a, b] = mean over the target pieces t of word a of (sum over the source pieces s of
    word b of w[..., t, s]): source pieces sum (the mass a word receives), target pieces average
    (a word's row stays a distribution over source words, up to the mass on dropped columns).

    Args:
        weights: (..., T, S) attention of one example (any leading dims, e.g. (L, H, T, S));
            it may be the padded slice of a batch.
        src_word_ids: word index of each source piece (`word_ids`); len <= S. Columns past its
            length (padding) and columns with id -1 (e.g. spaces) are dropped.
        tgt_word_ids: word index of each target piece; len <= T. Rows past its length (the EOS
            row when it has one id per target piece, padding) and rows with id -1 are dropped.

    Returns:
        (..., T_words, S_words) float tensor on the weights' device, T_words/S_words = largest
        word id + 1 (0 when there is none).
    """
    w = torch.as_tensor(weights)
    if w.dim() < 2:
        raise ValueError(f"attention weights need at least 2 dims (T, S), got shape {w.shape}")
    if not w.is_floating_point() or w.dtype in (torch.float16, torch.bfloat16):
        w = w.float()  # half-precision sums over many pieces lose digits
    T, S = w.shape[-2:]
    rows = _pooling(tgt_word_ids, T, average=True, dtype=w.dtype, device=w.device)  # (Tw, T)
    cols = _pooling(src_word_ids, S, average=False, dtype=w.dtype, device=w.device)  # (Sw, S)
    return rows @ w @ cols.T  # (..., Tw, T) @ (..., T, S) @ (S, Sw) -> (..., Tw, Sw)


# ---------------------------------------------------------------------------- hard links
def _as_matrix(word_weights: WeightsLike) -> Tensor:
    w = torch.as_tensor(word_weights)
    if w.dim() != 2:
        raise ValueError(f"word attention must be (T_words, S_words), got shape {tuple(w.shape)}")
    return w.detach().cpu()


def argmax_alignment(word_weights: WeightsLike, *, src_first: bool = True) -> Alignment:
    """One link per target word: the source word with the largest weight in its row.

    Args:
        word_weights: (T_words, S_words), e.g. from `word_attention`.
        src_first: links as (source word, target word) if True (the default), else
            (target word, source word). For the WPT en-fr gold (i = English, j = French), a model
            translating English -> French needs True, French -> English False.

    Returns:
        The set of links. Ties go to the first (leftmost) source word; a row without any positive
        weight (all its mass fell on dropped columns such as spaces) gets no link.
    """
    w = _as_matrix(word_weights)
    if w.size(1) == 0:
        return set()
    best = w.argmax(dim=1)  # (T_words,) first maximum on ties
    top = w.gather(1, best.unsqueeze(1)).squeeze(1)  # (T_words,)
    return {
        (s, t) if src_first else (t, s)
        for t, (s, value) in enumerate(zip(best.tolist(), top.tolist(), strict=True))
        if value > 0
    }


def threshold_alignment(
    word_weights: WeightsLike, threshold: float, *, src_first: bool = True
) -> Alignment:
    """Every (source word, target word) whose weight is strictly greater than `threshold`.

    Unlike `argmax_alignment` a target word can get several links or none, which suits
    one-to-many translations. `src_first` as in `argmax_alignment`.
    """
    w = _as_matrix(word_weights)
    return {(s, t) if src_first else (t, s) for t, s in torch.nonzero(w > threshold).tolist()}


# --------------------------------------------------------------------------------- AER
def alignment_error_rate(
    hyp: Sequence[Iterable[Link]],
    sure: Sequence[Iterable[Link]],
    possible: Sequence[Iterable[Link]] | None = None,
) -> dict[str, float]:
    """Corpus-level AER, precision and recall (Och & Ney 2003, section 5).

    Counts are summed over all sentences before dividing (not a mean of per-sentence ratios):

        precision = |A ∩ P| / |A|,  recall = |A ∩ S| / |S|,
        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

    Args:
        hyp: hypothesis links A of each sentence.
        sure: sure gold links S of each sentence.
        possible: possible gold links P of each sentence; None means P = S. Each P is taken as
            P ∪ S, so S ⊆ P holds whatever the input.

    Returns:
        {"aer", "precision", "recall"} plus the corpus counts "hyp", "sure", "possible",
        "hyp_and_sure", "hyp_and_possible". A ratio with nothing to count is vacuous: precision
        1.0 without hypothesis links, recall 1.0 without sure links, AER 0.0 without either.

    Raises:
        ValueError: the lists have different lengths.
    """
    if possible is None:
        possible = sure
    if not len(hyp) == len(sure) == len(possible):
        raise ValueError(
            f"{len(hyp)} hypothesis, {len(sure)} sure and {len(possible)} possible alignments: "
            "need one of each per sentence"
        )
    n_hyp = n_sure = n_possible = hyp_sure = hyp_possible = 0
    for a_links, s_links, p_links in zip(hyp, sure, possible, strict=True):
        a, s = set(a_links), set(s_links)
        p = set(p_links) | s
        n_hyp += len(a)
        n_sure += len(s)
        n_possible += len(p)
        hyp_sure += len(a & s)
        hyp_possible += len(a & p)
    return {
        "aer": 1.0 - (hyp_sure + hyp_possible) / (n_hyp + n_sure) if n_hyp + n_sure else 0.0,
        "precision": hyp_possible / n_hyp if n_hyp else 1.0,
        "recall": hyp_sure / n_sure if n_sure else 1.0,
        "hyp": float(n_hyp),
        "sure": float(n_sure),
        "possible": float(n_possible),
        "hyp_and_sure": float(hyp_sure),
        "hyp_and_possible": float(hyp_possible),
    }


# -------------------------------------------------------------------------- statistics


# ----------------------------------------------------------------------------- symmetrization
SYMMETRIZATIONS: tuple[str, ...] = (
    "intersect",
    "union",
    "grow-diag",
    "grow-diag-final",
    "grow-diag-final-and",
)

# (target offset, source offset) of a link's neighbours, in symal's order: the four
# horizontal/vertical ones, then the four diagonal ones
_NEIGHBOURS: tuple[Link, ...] = ((-1, 0), (0, -1), (1, 0), (0, 1))
_DIAGONALS: tuple[Link, ...] = ((-1, -1), (-1, 1), (1, -1), (1, 1))


def transpose(links: Iterable[Link]) -> Alignment:
    """(i, j) -> (j, i): a reverse model's (its source = our target, its target = our source)
    links as (source, target)."""
    return {(j, i) for i, j in links}


def symmetrize(forward: Iterable[Link], reverse: Iterable[Link], heuristic: str) -> Alignment:
    """Combine the two directions' (source word, target word) links of one sentence pair.

    Args:
        forward: links of the source -> target model.
        reverse: links of the target -> source model, transposed to (source, target).
        heuristic: one of `SYMMETRIZATIONS` (the module docstring defines each).

    Returns:
        The symmetrized links as (source word, target word).

    Raises:
        ValueError: an unknown heuristic.
    """
    forward, reverse = set(forward), set(reverse)
    if heuristic == "intersect":
        return forward & reverse
    if heuristic == "union":
        return forward | reverse
    if heuristic not in SYMMETRIZATIONS:
        raise ValueError(
            f"unknown symmetrization {heuristic!r}; valid: {', '.join(SYMMETRIZATIONS)}"
        )
    # internally every link is (target, source), the order symal sorts and offsets its points in
    fwd, rev = transpose(forward), transpose(reverse)
    grown = _Grown(fwd & rev)
    grown.grow(fwd | rev, diagonal=True)
    if heuristic != "grow-diag":
        both = heuristic == "grow-diag-final-and"
        grown.final(sorted(fwd - rev), both_uncovered=both)
        grown.final(sorted(rev - fwd), both_uncovered=both)
    return transpose(grown.points)


class _Grown:
    """The growing alignment of symal's `printgrow`: its (target, source) points, kept sorted,
    and the target and source words they cover."""

    def __init__(self, start: Alignment) -> None:
        self.points: Alignment = set(start)
        self.order: list[Link] = sorted(start)
        self.covered_tgt = {t for t, _ in start}
        self.covered_src = {s for _, s in start}

    def add(self, point: Link) -> None:
        self.points.add(point)
        bisect.insort(self.order, point)
        self.covered_tgt.add(point[0])
        self.covered_src.add(point[1])

    def leaves_uncovered(self, point: Link) -> bool:
        """True if at least one of the point's two words is not aligned yet."""
        return point[0] not in self.covered_tgt or point[1] not in self.covered_src

    def grow(self, union: Alignment, *, diagonal: bool) -> None:
        """Add neighbours from `union` that cover an unaligned word until none is left."""
        offsets = _NEIGHBOURS + _DIAGONALS if diagonal else _NEIGHBOURS
        added = True
        while added:
            added = False
            position = 0
            while position < len(self.order):
                t, s = point = self.order[position]
                for dt, ds in offsets:
                    neighbour = (t + dt, s + ds)
                    if neighbour in union and self.leaves_uncovered(neighbour):
                        self.add(neighbour)
                        added = True
                # the next point after this one, including points just inserted behind it
                position = bisect.bisect_right(self.order, point)

    def final(self, candidates: list[Link], *, both_uncovered: bool) -> None:
        """symal's final step over `candidates` (sorted (target, source) points)."""
        for point in candidates:
            if point in self.points:
                continue
            t_free, s_free = point[0] not in self.covered_tgt, point[1] not in self.covered_src
            if (t_free and s_free) if both_uncovered else (t_free or s_free):
                self.add(point)
