"""Word alignments as data: links (i, j) between the words of a sentence pair, sure S and
possible P (S ⊆ P), their gold files (Pharaoh, NAACL 2003), and which word each piece of a
tokenized text belongs to (`word_ids`).

Links built from a model are (source word, target word) unless `src_first=False`; a gold file
fixes its own order (the WPT 2003 set: English word, French word).
"""

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write_lines
from attnseq.io.user_paths import check_input_file

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


WORD_BOUNDARY = "\u2581"  # "▁", sentencepiece's marker of a piece that starts a word
# sentencepiece's, a language code first (data/multilingual_tokenizer.py)
LANGUAGE_PREFIXED = ("m2m100", "nllb", "mbart50")
PIECE_KINDS: tuple[str, ...] = ("word", "char", "sentencepiece", "marian", "bart")
PIECE_KINDS += LANGUAGE_PREFIXED
MARIAN_EOS = "</s>"  # the piece a Marian source ends with (data/marian_tokenizer.py)
BYTE_LEVEL_SPACE = "\u0120"  # "Ġ", byte-level BPE's mark of a piece after a space
BART_SPECIALS = ("<s>", "</s>")  # the pieces around a BART text (data/bart_tokenizer.py)


def word_ids(pieces: Sequence[str], kind: str) -> list[int]:
    """The word index of every piece (-1 for pieces that belong to no word).

    Args:
        pieces: the tokenizer's pieces of one text (`Tokenizer.pieces(text)`, no BOS/EOS).
        kind: "word" (one piece per word), "char" (whitespace characters separate words and
            belong to none: -1), "sentencepiece" (a piece starting with "▁" starts a new word;
            a first piece without it starts word 0 too), "marian" (sentencepiece's, with the
            source's closing </s> in no word), "bart" (byte-level BPE: a piece starting
            with "Ġ" starts a new word, the first piece too; <s> and </s> in no word), or
            one of `LANGUAGE_PREFIXED` (sentencepiece's, the first piece, the language
            code, and </s> in no word).

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
    if kind in ("sentencepiece", "marian", "bart", *LANGUAGE_PREFIXED):
        boundary = BYTE_LEVEL_SPACE if kind == "bart" else WORD_BOUNDARY
        outside = {"marian": (MARIAN_EOS,), "bart": BART_SPECIALS}.get(kind, ())
        if kind in LANGUAGE_PREFIXED:
            outside = (MARIAN_EOS,)
        ids = []
        word = -1
        for index, piece in enumerate(pieces):
            if piece in outside or (index == 0 and kind in LANGUAGE_PREFIXED):
                ids.append(-1)
                continue
            if piece.startswith(boundary) or word < 0:
                word += 1
            ids.append(word)
        return ids
    raise ValueError(f"unknown piece kind {kind!r}; valid kinds: {', '.join(PIECE_KINDS)}")


# ------------------------------------------------------ gold files given beside their sentences
# the order of a gold link: (source word, target word) or the reverse
ALIGNMENT_ORDERS = ("src-tgt", "tgt-src")


def read_gold_links(
    gold: Path,
    possible: Path | None,
    gold_format: str,
    order: str,
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    *,
    what: str,
    order_option: str,
    files_hint: str = "",
) -> tuple[list[Alignment], list[Alignment]]:
    """The sure and possible links of a gold file (and its possible-links file) for the given
    sentence pairs, in the gold's own `order` ("src-tgt" or "tgt-src"), as eval and align read
    them; UserError starting with `what` (the option or set and the file) for a malformed link
    or one outside its sentence's words, naming `order_option` and, for the latter,
    `files_hint`."""
    lengths, sides = word_counts(src_lines, tgt_lines, src_first=order == "src-tgt")
    try:
        return read_gold_file(
            gold,
            possible,
            gold_format=gold_format,
            n_sentences=len(src_lines),
            lengths=lengths,
            sides=sides,
        )
    except LinkOutsideSentence as error:
        raise UserError(
            f"{what}: {error}; with {order_option} {order} a link is ({', '.join(sides)}): is "
            f"that the gold's order{files_hint}?"
        ) from None
    except ValueError as error:
        raise UserError(f"{what}: {error}") from None


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
