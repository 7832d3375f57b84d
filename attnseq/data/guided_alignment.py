"""The gold links of guided alignment training (Garg et al. 2019, "Jointly Learning to Align and
Translate with Transformer Models", EMNLP): word links of the training pairs, read from a
Pharaoh file and mapped onto the tokenizers' pieces (`piece_links`).

Shapes: piece links are (source piece, target piece) pairs, 0-based, no BOS/EOS.
"""

from collections.abc import Sequence
from pathlib import Path

from attnseq.config.schema import DataConfig
from attnseq.data.batching import PieceLinks
from attnseq.data.locations import resolve_data_path
from attnseq.data.prepare import TRAIN, PreparedData
from attnseq.data.sentencepiece_tokenizer import SentencePieceTokenizer
from attnseq.data.tokenizers import Tokenizer
from attnseq.data.word_alignments import Alignment, read_pharaoh, word_ids
from attnseq.errors import UserError


def read_alignment_file(cfg: DataConfig, split: str, n_pairs: int) -> list[Alignment]:
    """The word links of every loaded pair of `split`, from `data.alignments[split]`.

    Args:
        n_pairs: the split's pairs as loaded (`PreparedData.stats[split]["total"]`).

    Raises:
        UserError: no such file, not UTF-8, a malformed link, or a line count that is not the
            split's pair count (the message says which file and what was expected).
    """
    key = f"data.alignments.{split}"
    path = resolve_data_path(cfg.alignments[split], cfg)
    if not path.is_file():
        raise UserError(
            f"{key}={cfg.alignments[split]}: no such file ({path}); give a Pharaoh file of word "
            "links, one line per pair (scripts/make_alignments.py writes them)"
        )
    try:
        sure, possible = read_pharaoh(Path(path))
    except UnicodeDecodeError as error:
        raise UserError(f"{key} {path} is not UTF-8 text ({error.reason})") from None
    except ValueError as error:
        raise UserError(f"{key} {path}: {error}") from None
    cut = cfg.max_examples is not None and split == TRAIN and n_pairs == cfg.max_examples
    if len(possible) != n_pairs and not (cut and len(possible) > n_pairs):
        raise UserError(
            f"{key} {path} has {len(possible)} lines, but the {split} split has {n_pairs} "
            "pairs: the file needs one line of links per pair, in the split's order (after "
            "held-out valid/test pairs are taken out of train)"
        )
    return possible[:n_pairs]


def piece_links(
    links: Alignment,
    src_pieces: Sequence[str],
    tgt_pieces: Sequence[str],
    kinds: tuple[str, str],
) -> PieceLinks:
    """Map word links onto pieces: (i, j) links every piece of source word i with every piece
    of target word j.

    Args:
        links: (source word, target word) links, 0-based.
        src_pieces, tgt_pieces: the tokenizers' pieces of the two texts (`Tokenizer.pieces`).
        kinds: the piece kinds of source and target for `word_ids` ("word", "char",
            "sentencepiece").

    Returns:
        Sorted (source piece, target piece) links.

    Raises:
        ValueError: a link to a word the text does not have.
    """
    src_words = _pieces_of_words(src_pieces, kinds[0])  # source word -> its piece positions
    tgt_words = _pieces_of_words(tgt_pieces, kinds[1])
    result: set[tuple[int, int]] = set()
    for i, j in links:
        if i >= len(src_words) or j >= len(tgt_words):
            raise ValueError(
                f"link {i}-{j} is outside the pair's {len(src_words)} source and "
                f"{len(tgt_words)} target words"
            )
        result.update((s, t) for s in src_words[i] for t in tgt_words[j])
    return sorted(result)


def _pieces_of_words(pieces: Sequence[str], kind: str) -> list[list[int]]:
    """The piece positions of every word, word by word."""
    ids = word_ids(pieces, kind)
    words: list[list[int]] = [[] for _ in range(max(ids, default=-1) + 1)]
    for position, word in enumerate(ids):
        if word >= 0:
            words[word].append(position)
    return words


def split_piece_links(cfg: DataConfig, data: PreparedData, split: str = TRAIN) -> list[PieceLinks]:
    """The piece links of every kept example of `split` (aligned with `data.examples[split]`),
    from `data.alignments[split]`.

    Raises:
        UserError: the file's problems (`read_alignment_file`), or a link outside its pair's
            words (the message names the line).
    """
    words = read_alignment_file(cfg, split, data.stats[split]["total"])
    tokenizers = data.tokenizers
    kinds = (type(tokenizers.src).kind, type(tokenizers.tgt).kind)
    src_pieces = _pieces(tokenizers.src, [src for src, _ in data.pairs[split]])
    tgt_pieces = _pieces(tokenizers.tgt, [tgt for _, tgt in data.pairs[split]])
    result: list[PieceLinks] = []
    for k, position in enumerate(data.positions[split]):
        try:
            links = piece_links(words[position], src_pieces[k], tgt_pieces[k], kinds)
        except ValueError as error:
            raise UserError(
                f"data.alignments.{split}, line {position + 1}: {error}; is it the file of "
                f"this split's pairs, source words first?"
            ) from None
        src_len, tgt_len = len(data.examples[split][k][0]), len(data.examples[split][k][1])
        result.append([(s, t) for s, t in links if s < src_len and t < tgt_len])
    return result


def _pieces(tokenizer: Tokenizer, texts: list[str]) -> list[list[str]]:
    if isinstance(tokenizer, SentencePieceTokenizer):
        return tokenizer.pieces_batch(texts)  # one call into the library, threaded
    return [tokenizer.pieces(text) for text in texts]
