"""SentencePiece subword tokenizer (Kudo & Richardson 2018, "SentencePiece: A simple and language
independent subword tokenizer and detokenizer for Neural Text Processing", EMNLP demo): BPE or
unigram models, trained with attnseq's special ids and cached under `cache_root()/spm/`.

Segmentations are sampled here in Python (`segment_sampler`): sentencepiece's own sampling
draws differently in another process, which would break exact resume and DataLoader workers.
"""

import base64
import functools
import hashlib
import io
import itertools
import json
import logging
import math
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import sentencepiece as spm

from attnseq.data.locations import cache_root
from attnseq.data.tokenizers import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    UNK,
    UNK_ID,
    Tokenizer,
    flatten_ids,
    output_ids,
    register_tokenizer,
)
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write

log = logging.getLogger("attnseq")

STATE_VERSION = 1
MODEL_TYPES = ("bpe", "unigram")
# SentencePiece's own recommendation: sample at most this many sentences for training
# (data.spm_input_sentence_size; Marian's and fairseq's recipes pass the same option).
INPUT_SENTENCE_SIZE = 1_000_000
# Long inputs (summarization sources) are ordinary sentences to us; the library default (4192
# bytes) would silently leave every longer one out of training.
MAX_SENTENCE_LENGTH = 1 << 16
HASH_BLOCK = 65_536  # texts hashed in one update
# Words whose ids `encode_flat` keeps; past this many it starts again (memory stays bounded on
# corpora with millions of distinct words).
WORD_CACHE_SIZE = 1 << 20


@register_tokenizer
class SentencePieceTokenizer(Tokenizer):
    """A trained SentencePiece model behind the `Tokenizer` interface."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes) -> None:
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        self._sampler: Callable[[str, float, random.Random], list[int]] | None = None
        self._words = _WordTable()  # encode_flat's known words
        self._words_independent = _words_encode_independently(self._proto)
        specials = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if specials != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"sentencepiece model has special ids pad/unk/bos/eos = {specials}; attnseq "
                f"needs {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)} (train it with `train`)"
            )

    @property
    def model_proto(self) -> bytes:
        """The serialized model (what `spm.SentencePieceProcessor(model_proto=...)` reads)."""
        return self._proto

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def pieces(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def encode(self, text: str) -> list[int]:
        # Control symbols (<s>, </s>, <pad>) are never produced from raw text, so a literal
        # "</s>" in the input cannot end decoding early.
        return self._sp.encode(text, out_type=int)

    @property
    def model_type(self) -> str:
        """ "unigram" or "bpe" (what the model was trained as)."""
        from sentencepiece import sentencepiece_model_pb2

        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(self._proto)
        return "bpe" if proto.trainer_spec.model_type == proto.trainer_spec.BPE else "unigram"

    def encode_sampled(self, text: str, alpha: float, rng: random.Random) -> list[int]:
        """One segmentation of `text` drawn with `rng`: unigram sampling over the whole lattice
        with smoothing `alpha`, or BPE-dropout with merge-dropout probability `alpha`
        (`segment_sampler`, below)."""
        if self._sampler is None:
            self._sampler = segment_sampler(self._sp, self.model_type)
        return self._sampler(text, alpha, rng)

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode` of many texts as (every text's ids one after the other, int32; the number
        of ids of each text, int64), the same ids: each distinct word is encoded once
        (`_words_encode_independently`), the new ones in one call into the library (its
        threads, one per core).

        The texts are joined with a sentinel word between them and split once; each word
        becomes the row of its ids in `_words` and numpy gathers the rows' ids:

            rows r_1..r_W of the W words, n_i = |ids(r_i)|, e_i = n_1 + ... + n_i
            flat[e_{i-1} + j] = table[start(r_i) + j]   for j < n_i

        and a text's length is the e_i at the sentinel after it minus the one before it.
        """
        threads = os.cpu_count() or 1
        count = len(texts)
        if not count:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        joined = _SENTINEL_GAP.join(texts)
        if not self._words_independent or joined.count(_SENTINEL) != count - 1:
            return flatten_ids(self._sp.encode(list(texts), out_type=int, num_threads=threads))
        words = joined.split(" ")
        table = self._words
        new = set(words).difference(table.rows)
        if len(table.rows) + len(new) > WORD_CACHE_SIZE:
            table.clear()
            new = set(words).difference(table.rows)
        if new:
            ordered = list(new)
            table.add(ordered, self._sp.encode(ordered, out_type=int, num_threads=threads))
        rows = np.fromiter(map(table.rows.__getitem__, words), np.int64, count=len(words))
        word_lengths = table.lengths[rows]
        ends = np.cumsum(word_lengths)
        gather = np.repeat(table.starts[rows] - (ends - word_lengths), word_lengths)
        flat = table.ids[gather + np.arange(len(gather))]
        text_ends = np.append(ends[rows == _SENTINEL_ROW], ends[-1] if len(ends) else 0)
        return flat, np.diff(text_ends, prepend=0)

    def _clean(self, ids: Iterable[int]) -> list[int]:
        size = self.vocab_size
        return [token_id if 0 <= token_id < size else UNK_ID for token_id in output_ids(ids)]

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.decode(self._clean(ids))

    def ids_to_pieces(self, ids: Iterable[int]) -> list[str]:
        size = self.vocab_size
        return [self._sp.id_to_piece(int(i)) if 0 <= int(i) < size else UNK for i in ids]

    def pieces_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """`pieces` of many texts in one call. An unknown piece comes back as its surface text
        (e.g. "Zü"), not as "<unk>": what a copy model copies (extended_vocab.py)."""
        return self._sp.encode(list(texts), out_type=str)

    def piece_to_id(self, piece: str) -> int:
        token_id = self._sp.piece_to_id(piece)
        # control symbols are never pieces of text (`encode` never produces them)
        return UNK_ID if token_id in (PAD_ID, BOS_ID, EOS_ID) else token_id

    def pieces_to_text(self, pieces: list[str]) -> str:
        # unknown pieces are written as they are, "▁" becomes a space
        return self._sp.decode_pieces(pieces)

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers started by "spawn" receive the tokenizer pickled
        return {"proto": self._proto}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["proto"])

    def state_dict(self) -> dict[str, Any]:
        # base64 text, not bytes: the Tokenizer interface promises JSON state (`save`)
        return {
            "kind": self.kind,
            "version": STATE_VERSION,
            "model": base64.b64encode(self._proto).decode("ascii"),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        cls.check_state(state, STATE_VERSION)
        model = state.get("model")
        if not isinstance(model, str):
            raise TypeError(f"sentencepiece state 'model' must be base64 text, got {type(model)}")
        return cls(base64.b64decode(model))

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        min_freq: int = 1,
        max_size: int | None = None,
        **options: Any,
    ) -> Self:
        """Train (or load from the cache) a model on `texts`.

        Options: vocab_size (default: max_size + 4 specials, else 8000), model_type ("bpe" or
        "unigram"), character_coverage (1.0 keeps every character; 0.9995 suits large
        alphabets), cache_dir (default cache_root()/spm; None in options means the default).
        `min_freq` has no SentencePiece counterpart and must stay 1.
        """
        if min_freq != 1:
            raise ValueError("sentencepiece has no min_freq; use vocab_size instead")
        unknown = set(options) - {"vocab_size", "model_type", "character_coverage", "cache_dir"}
        if unknown:
            raise ValueError(f"unknown sentencepiece options: {sorted(unknown)}")
        vocab_size = options.get("vocab_size") or (max_size + 4 if max_size else 8000)
        return train_sentencepiece(
            texts,
            vocab_size=int(vocab_size),
            model_type=str(options.get("model_type", "bpe")),
            character_coverage=float(options.get("character_coverage", 1.0)),
            cache_dir=options.get("cache_dir"),
        )


def train_sentencepiece(
    texts: Iterable[str],
    *,
    vocab_size: int = 8000,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    input_sentence_size: int = INPUT_SENTENCE_SIZE,
    cache_dir: str | Path | None = None,
) -> SentencePieceTokenizer:
    """A SentencePiece tokenizer trained on `texts` (empty texts skipped), cached by content.

    `texts` is streamed, twice: once to hash it, once into the trainer, which keeps a uniform
    sample of `input_sentence_size` texts (reservoir sampling; 0: every text), so memory
    holds the sample, never the corpus. An iterator (that can be read only once) is read into
    a list first.

    The cache key is SHA-256 over the settings, the sentencepiece version and every text (in
    order); the model lives in `cache_dir/<key>.model` (default cache_root()/spm).
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if vocab_size < 5:
        raise ValueError(f"vocab_size must be > 4 (the special tokens), got {vocab_size}")
    if input_sentence_size < 0 or 0 < input_sentence_size <= 100:  # the trainer's own bound
        raise ValueError(
            f"data.spm_input_sentence_size must be 0 (every text) or > 100, got "
            f"{input_sentence_size}"
        )
    if iter(texts) is texts:
        texts = list(texts)
    settings = {
        "vocab_size": vocab_size,
        "model_type": model_type,
        "character_coverage": character_coverage,
        "sentencepiece": spm.__version__,
        "format": STATE_VERSION,
    }
    if input_sentence_size != INPUT_SENTENCE_SIZE:  # models of the default keep their keys
        settings["input_sentence_size"] = input_sentence_size
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    count = 0
    stream = iter(texts)
    # Every text followed by a separator, so ["ab"] and ["a", "b"] hash differently; a block
    # of texts is hashed in one update (the same bytes as one update per text).
    while block := list(itertools.islice(stream, HASH_BLOCK)):
        kept = list(_nonempty(block))
        if kept:
            digest.update(("\0".join(kept) + "\0").encode("utf-8"))
            count += len(kept)
    if not count:
        raise ValueError("cannot train a sentencepiece model on no text")
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "spm"
    path = folder / f"{digest.hexdigest()[:32]}.model"
    if path.is_file():
        log.info("sentencepiece: reusing cached model %s", path)
        return SentencePieceTokenizer(path.read_bytes())
    log.info(
        "sentencepiece: training %s, vocab %d, coverage %g on %d texts%s",
        model_type,
        vocab_size,
        character_coverage,
        count,
        f" (a sample of {input_sentence_size:,})" if 0 < input_sentence_size < count else "",
    )
    settings["input_sentence_size"] = input_sentence_size
    proto = _train_model_proto(_nonempty(texts), settings)
    tokenizer = SentencePieceTokenizer(proto)
    if tokenizer.vocab_size < vocab_size:
        log.info(
            "sentencepiece: the corpus supports only %d pieces (asked for %d)",
            tokenizer.vocab_size,
            vocab_size,
        )
    _write_atomically(path, proto)
    return tokenizer


_SENTINEL = "\x00"  # a word no text holds (checked): the boundary between two texts
_SENTINEL_GAP = f" {_SENTINEL} "
_SENTINEL_ROW = 1


class _WordTable:
    """Words and their ids, for `encode_flat`: `rows` maps a word to its row, row r's ids are
    `ids[starts[r]:starts[r] + lengths[r]]`. Row 0 is the empty word (what runs of spaces
    split into), row 1 the sentinel between texts; both have no ids."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.rows: dict[str, int] = {"": 0, _SENTINEL: _SENTINEL_ROW}
        self.ids = np.zeros(0, np.int32)
        self.starts = np.zeros(2, np.int64)
        self.lengths = np.zeros(2, np.int64)

    def add(self, words: list[str], ids: list[list[int]]) -> None:
        new_ids, lengths = flatten_ids(ids)
        starts = len(self.ids) + np.cumsum(lengths) - lengths
        first = len(self.rows)
        self.rows.update(zip(words, range(first, first + len(words)), strict=True))
        self.ids = np.concatenate([self.ids, new_ids])
        self.starts = np.concatenate([self.starts, starts])
        self.lengths = np.concatenate([self.lengths, lengths])


def _words_encode_independently(proto: bytes) -> bool:
    """Whether the model encodes a text as the concatenation of its space-separated words'
    encodings: pieces split by whitespace, "▁" a prefix, a dummy prefix added and runs of
    spaces removed. Then no piece holds "▁" but at its start, so neither a BPE merge nor a
    unigram segment crosses a word, and the normalized text is "▁" + word for each word."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    trainer, normalizer = model.trainer_spec, model.normalizer_spec
    return (
        trainer.split_by_whitespace
        and not trainer.treat_whitespace_as_suffix
        and normalizer.add_dummy_prefix
        and normalizer.remove_extra_whitespaces
    )


def _nonempty(texts: Iterable[str]) -> Iterator[str]:
    return filter(str.strip, texts)  # a text of only whitespace strips to "", which is false


def _train_model_proto(corpus: Iterator[str], settings: dict[str, Any]) -> bytes:
    """Run the SentencePiece trainer in memory; returns the serialized model."""
    spm.set_random_generator_seed(1)  # sampling/shuffling: the same model for the same input
    model = io.BytesIO()
    try:
        _run_trainer(corpus, settings, model)
    except RuntimeError as error:  # the trainer's checks on the data (e.g. too few pieces)
        detail = str(error).split("] ", 1)[-1].splitlines()[0]
        raise UserError(
            f"cannot train the sentencepiece model (data.spm_vocab_size="
            f"{settings['vocab_size']}): {detail}"
        ) from None
    return model.getvalue()


def _run_trainer(corpus: Iterator[str], settings: dict[str, Any], model: io.BytesIO) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=corpus,
        model_writer=model,
        vocab_size=settings["vocab_size"],
        model_type=settings["model_type"],
        character_coverage=settings["character_coverage"],
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        pad_piece=PAD,
        unk_piece=UNK,
        bos_piece=BOS,
        eos_piece=EOS,
        unk_surface=UNK,  # decode writes an unknown piece as "<unk>", like the other kinds
        hard_vocab_limit=False,  # a tiny corpus gets a smaller vocabulary, not an error
        input_sentence_size=settings["input_sentence_size"],
        shuffle_input_sentence=True,
        max_sentence_length=MAX_SENTENCE_LENGTH,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,  # the trainer's progress log goes to stderr otherwise
    )


def _write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file and rename it, so a concurrent reader never sees half a
    model (parallel sweep jobs train the same model at the same time)."""
    atomic_write(path, lambda out: out.write(data))


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
    """One segmentation of the normalized `text` (subword regularization: Kudo 2018, "Subword
    Regularization: Improving Neural Network Translation Models with Multiple Subword
    Candidates", ACL, section 3.2, l = infinity): x drawn with P(x) proportional to
    prod_i p(x_i)^alpha over every path of the lattice, by forward filtering, backward sampling:

        A[0] = 0,  A[j] = logsumexp over pieces (i -> j) of A[i] + alpha * log p(piece)

    then, from j = n back to 0, the piece ending at j is chosen with probability
    exp(A[i] + alpha * log p(piece) - A[j]) (sentencepiece's `nbest_size=-1` sampling). No
    piece spans a word, so the lattice is one per word (`PieceTable.lattice` caches it); ids
    in text order."""
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
    """BPE-dropout segmentation of the normalized `text` (Provilkov et al. 2020, "BPE-Dropout:
    Simple and Effective Subword Regularization", ACL, section 2): each word starts as
    characters; at every step each possible merge is dropped with probability `dropout`, and
    the remaining merge of the highest priority (the merged piece's score) is applied, until
    none remains."""
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
