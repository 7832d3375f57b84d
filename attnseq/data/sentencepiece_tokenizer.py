"""SentencePiece subword tokenizer (Kudo & Richardson 2018, "SentencePiece: A simple and language
independent subword tokenizer and detokenizer for Neural Text Processing", EMNLP demo).

SentencePiece treats text as a raw character stream (a space becomes the meta symbol "▁"), so
`decode` restores the original spacing without language-specific detokenization rules. Two
segmentation models are offered: BPE (Sennrich et al. 2016) and the unigram language model
(Kudo 2018).

The model is trained with the ids every attnseq tokenizer uses (<pad>=0, <unk>=1, <s>=2, </s>=3)
and with `hard_vocab_limit=False`, so a corpus too small for the requested vocabulary yields a
smaller one instead of an error. Trained models are cached in `cache_root()/spm/` under a hash
of the training texts and every setting (and the library version), so a second run with the
same data and settings loads the model instead of training it again.

`state_dict()` holds the serialized model proto as base64 text: raw bytes would also survive
`torch.save` + `torch.load(weights_only=True)`, but the tokenizer interface promises
JSON-compatible state (`Tokenizer.save` writes JSON).
"""

import base64
import hashlib
import io
import json
import logging
import os
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import sentencepiece as spm

from attnseq.data.locations import cache_root
from attnseq.data.segment_sampling import segment_sampler
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
    output_ids,
    register_tokenizer,
)
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write

log = logging.getLogger("attnseq")

STATE_VERSION = 1
MODEL_TYPES = ("bpe", "unigram")
# SentencePiece's own recommendation: sample at most this many sentences for training.
INPUT_SENTENCE_SIZE = 1_000_000
# Long inputs (summarization sources) are ordinary sentences to us; the library default (4192
# bytes) would silently leave every longer one out of training.
MAX_SENTENCE_LENGTH = 1 << 16


@register_tokenizer
class SentencePieceTokenizer(Tokenizer):
    """A trained SentencePiece model behind the `Tokenizer` interface."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes) -> None:
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        self._sampler: Callable[[str, float, random.Random], list[int]] | None = None
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
        (segment_sampling.py)."""
        if self._sampler is None:
            self._sampler = segment_sampler(self._sp, self.model_type)
        return self._sampler(text, alpha, rng)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of many texts in one call (the library's threads; much faster)."""
        return self._sp.encode(list(texts), out_type=int)

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
    cache_dir: str | Path | None = None,
) -> SentencePieceTokenizer:
    """A SentencePiece tokenizer trained on `texts` (empty texts skipped), cached by content.

    The cache key is SHA-256 over the settings, the sentencepiece version and every text (in
    order); the model lives in `cache_dir/<key>.model` (default cache_root()/spm).
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
    if vocab_size < 5:
        raise ValueError(f"vocab_size must be > 4 (the special tokens), got {vocab_size}")
    corpus = [text for text in texts if text.strip()]
    if not corpus:
        raise ValueError("cannot train a sentencepiece model on no text")
    settings = {
        "vocab_size": vocab_size,
        "model_type": model_type,
        "character_coverage": character_coverage,
        "sentencepiece": spm.__version__,
        "format": STATE_VERSION,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for text in corpus:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")  # a separator, so ["ab"] and ["a", "b"] hash differently
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "spm"
    path = folder / f"{digest.hexdigest()[:32]}.model"
    if path.is_file():
        log.info("sentencepiece: reusing cached model %s", path)
        return SentencePieceTokenizer(path.read_bytes())
    log.info(
        "sentencepiece: training %s, vocab %d, coverage %g on %d texts",
        model_type,
        vocab_size,
        character_coverage,
        len(corpus),
    )
    proto = _train_model_proto(corpus, settings)
    tokenizer = SentencePieceTokenizer(proto)
    if tokenizer.vocab_size < vocab_size:
        log.info(
            "sentencepiece: the corpus supports only %d pieces (asked for %d)",
            tokenizer.vocab_size,
            vocab_size,
        )
    _write_atomically(path, proto)
    return tokenizer


def _train_model_proto(corpus: list[str], settings: dict[str, Any]) -> bytes:
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


def _run_trainer(corpus: list[str], settings: dict[str, Any], model: io.BytesIO) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
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
        input_sentence_size=INPUT_SENTENCE_SIZE,
        shuffle_input_sentence=True,
        max_sentence_length=MAX_SENTENCE_LENGTH,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,  # the trainer's progress log goes to stderr otherwise
    )


def _write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file and rename it, so a concurrent reader never sees half a
    model (parallel sweep jobs train the same model at the same time)."""
    atomic_write(path, lambda out: out.write(data))
