"""Drawing one segmentation of a text from a sentencepiece model, reproducibly.

sentencepiece's own sampling (`encode(..., enable_sampling=True)`) draws from a generator that
`set_random_generator_seed` does not pin down across processes (the draws of one seed differ
from one process to the next), which would break exact resume and DataLoader workers. So the
two samplers run here, in Python, on the model's pieces and scores, with a generator seeded by
the caller:

- Unigram models, subword regularization (Kudo 2018, "Subword Regularization: Improving Neural
  Network Translation Models with Multiple Subword Candidates", ACL, Section 3.2, l = infinity):
  a segmentation x of the normalized text is drawn with P(x) proportional to
  prod_i p(x_i)^alpha over every path of the lattice, by forward filtering, backward sampling:
      A[0] = 0,  A[j] = logsumexp over pieces (i -> j) of A[i] + alpha * log p(piece)
  then from j = n back to 0 the piece ending at j is chosen with probability
      exp(A[i] + alpha * log p(piece) - A[j]).
  This is sentencepiece's `nbest_size=-1` sampling.
- BPE models, BPE-dropout (Provilkov et al. 2020, "BPE-Dropout: Simple and Effective Subword
  Regularization", ACL, Section 2): each word starts as characters; at every merge step each
  possible merge is dropped with probability p, and the remaining merge of the highest
  priority (the merged piece's score) is applied; segmentation ends when none remains.

Pieces never span a word boundary ("▁" starts every word of the normalized text, and no piece
holds it inside), so every segmentation cuts the text before each "▁": the lattice factorizes
into one lattice per word, and both samplers work word by word (a unigram word's lattice and
forward probabilities are computed once and cached). A character outside the
vocabulary becomes <unk>, scored as sentencepiece scores it (the lowest piece score - 10).
"""

import functools
import math
import random
from collections.abc import Callable

import sentencepiece as spm

UNK_PENALTY = 10.0  # sentencepiece's kUnkPenalty: unknown pieces score min_score - 10
WORD_START = "\u2581"
LATTICE_CACHE = 1 << 16  # distinct words whose lattices are kept


class PieceTable:
    """The model's text pieces: piece -> (id, score), the longest piece length, the unknown id
    and score."""

    def __init__(self, processor: spm.SentencePieceProcessor) -> None:
        self.pieces: dict[str, tuple[int, float]] = {}
        for piece_id in range(processor.get_piece_size()):
            special = processor.is_control(piece_id) or processor.is_unknown(piece_id)
            if special or processor.is_unused(piece_id):
                continue
            self.pieces[processor.id_to_piece(piece_id)] = (piece_id, processor.get_score(piece_id))
        self.longest = max((len(piece) for piece in self.pieces), default=1)
        self.unk_id = processor.unk_id()
        lowest = min((score for _, score in self.pieces.values()), default=0.0)
        self.unk_score = lowest - UNK_PENALTY
        # a word's lattice and forward probabilities depend on (word, alpha) alone: computed
        # once per distinct word (corpora repeat their words), then only sampled backward
        self.lattice = functools.lru_cache(maxsize=LATTICE_CACHE)(self._lattice)

    def _lattice(
        self, word: str, alpha: float
    ) -> tuple[list[list[tuple[int, int, float]]], list[float]]:
        return _forward_filter(self, word, alpha)


def sample_unigram(table: PieceTable, text: str, alpha: float, rng: random.Random) -> list[int]:
    """One segmentation of the normalized `text` drawn by forward filtering, backward sampling
    (module docstring), word by word; ids in text order."""
    ids: list[int] = []
    for word in _words(text):
        ids.extend(_backward_sample(table.lattice(word, alpha), rng))
    return ids


def _forward_filter(
    table: "PieceTable", word: str, alpha: float
) -> tuple[list[list[tuple[int, int, float]]], list[float]]:
    """The lattice of `word`: for every end j, the pieces word[i:j] as (i, id, weight) with
    their transition probabilities exp(A[i] + alpha * score - A[j]) as weight, and A."""
    n = len(word)
    arriving: list[list[tuple[int, int, float]]] = [[] for _ in range(n + 1)]
    for start in range(n):
        for end in range(start + 1, min(n, start + table.longest) + 1):
            found = table.pieces.get(word[start:end])
            if found is not None:
                arriving[end].append((start, found[0], alpha * found[1]))
        if word[start] not in table.pieces:  # no single-character piece: <unk>
            arriving[start + 1].append((start, table.unk_id, alpha * table.unk_score))
    forward = [0.0] + [-math.inf] * n
    for end in range(1, n + 1):
        terms = [forward[start] + weight for start, _, weight in arriving[end]]
        top = max(terms)
        forward[end] = top + math.log(sum(math.exp(term - top) for term in terms))
    for end in range(1, n + 1):
        arriving[end] = [
            (start, piece_id, math.exp(forward[start] + weight - forward[end]))
            for start, piece_id, weight in arriving[end]
        ]
    return arriving, forward


def _backward_sample(
    lattice: tuple[list[list[tuple[int, int, float]]], list[float]], rng: random.Random
) -> list[int]:
    arriving, _ = lattice
    ids: list[int] = []
    end = len(arriving) - 1
    while end > 0:
        edges = arriving[end]
        start, piece_id, _ = edges[_choose([p for _, _, p in edges], rng)]
        ids.append(piece_id)
        end = start
    ids.reverse()
    return ids


def sample_bpe(table: PieceTable, text: str, dropout: float, rng: random.Random) -> list[int]:
    """BPE-dropout segmentation of the normalized `text` (module docstring)."""
    ids: list[int] = []
    for word in _words(text):
        symbols = list(word)
        while len(symbols) > 1:
            best, best_score = -1, -math.inf
            for position in range(len(symbols) - 1):
                found = table.pieces.get(symbols[position] + symbols[position + 1])
                if found is None or rng.random() < dropout:
                    continue
                if found[1] > best_score:
                    best, best_score = position, found[1]
            if best < 0:
                break
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
        ids.extend(table.pieces.get(symbol, (table.unk_id, 0.0))[0] for symbol in symbols)
    return ids


def _words(text: str) -> list[str]:
    """The text cut before every word-start mark ("▁a▁b" -> ["▁a", "▁b"])."""
    words, start = [], 0
    for position in range(1, len(text)):
        if text[position] == WORD_START:
            words.append(text[start:position])
            start = position
    if text:
        words.append(text[start:])
    return words


def _choose(weights: list[float], rng: random.Random) -> int:
    """An index drawn with probability proportional to `weights`."""
    point = rng.random() * sum(weights)
    for index, weight in enumerate(weights):
        point -= weight
        if point < 0:
            return index
    return len(weights) - 1


def segment_sampler(
    processor: spm.SentencePieceProcessor, model_type: str
) -> Callable[[str, float, random.Random], list[int]]:
    """`sample(text, alpha, rng) -> ids` for a trained model: unigram sampling or BPE-dropout,
    on the text as the model normalizes it."""
    table = PieceTable(processor)
    sample = sample_unigram if model_type == "unigram" else sample_bpe

    def draw(text: str, alpha: float, rng: random.Random) -> list[int]:
        return sample(table, processor.normalize(text), alpha, rng)

    return draw
