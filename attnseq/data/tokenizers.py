"""Tokenizers: text <-> token ids, with <pad>=0, <unk>=1, <s>=2 (BOS), </s>=3 (EOS) for every kind.

A tokenizer's `state_dict()` holds only JSON values, so it sits inside a checkpoint that
`torch.load(weights_only=True)` reads.
"""

import abc
import base64
import itertools
import json
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import numpy as np

from attnseq.errors import UserError

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, BOS, EOS)  # index == id

STATE_VERSION = 1
PRETRAINED_STATE_VERSION = 1  # PretrainedTokenizer's state


class Vocabulary:
    """A fixed token <-> id mapping: the special tokens at ids 0..3, then `tokens` in order."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._itos: list[str] = list(SPECIAL_TOKENS)
        self._stoi: dict[str, int] = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
        for token in tokens:
            if not isinstance(token, str) or not token:
                raise ValueError(f"vocabulary tokens must be non-empty strings, got {token!r}")
            if token in self._stoi:
                raise ValueError(f"token {token!r} appears twice (or is a special token)")
            self._stoi[token] = len(self._itos)
            self._itos.append(token)

    @classmethod
    def from_counts(
        cls, counts: Counter[str], *, min_freq: int = 1, max_size: int | None = None
    ) -> Self:
        """Most frequent first, ties alphabetical (deterministic); specials are never counted.

        `max_size` caps the number of regular tokens; the 4 special tokens come on top.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0 or None, got {max_size}")
        ranked = sorted(
            (token for token, n in counts.items() if n >= min_freq and token not in SPECIAL_TOKENS),
            key=lambda token: (-counts[token], token),
        )
        return cls(ranked if max_size is None else ranked[:max_size])

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    @property
    def tokens(self) -> list[str]:
        """The regular (non-special) tokens, in id order."""
        return self._itos[len(SPECIAL_TOKENS) :]

    def token_to_id(self, token: str) -> int:
        """The token's id; UNK_ID for unknown tokens."""
        return self._stoi.get(token, UNK_ID)

    def id_to_token(self, token_id: int) -> str:
        """The token string of an id; "<unk>" for ids outside the vocabulary."""
        return self._itos[token_id] if 0 <= token_id < len(self._itos) else UNK


def output_ids(ids: Iterable[int]) -> Iterator[int]:
    """The ids of a decoded output as plain ints (a list or a (T,) tensor): up to the first EOS,
    without <pad> and <s>, which carry no text."""
    for token_id in ids:
        token_id = int(token_id)  # also accepts 0-d tensors from iterating a (T,) tensor
        if token_id == EOS_ID:
            return
        if token_id not in (PAD_ID, BOS_ID):
            yield token_id


def flatten_ids(ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ids -> (every list's ids one after the other, int32; each list's length,
    int64)."""
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lengths.sum()))
    return flat, lengths


class Tokenizer(abc.ABC):
    """Text <-> ids. Subclasses set `kind` and are registered with `register_tokenizer`."""

    kind: ClassVar[str]

    # Fixed for every kind attnseq trains (a SentencePiece model is trained with the same
    # ids); a pretrained model's tokenizer has its own (marian_tokenizer.py), which models
    # read from their Vocabularies, so none of them has to ask which id pads.
    pad_id: ClassVar[int] = PAD_ID
    unk_id: ClassVar[int] = UNK_ID
    bos_id: ClassVar[int] = BOS_ID
    eos_id: ClassVar[int] = EOS_ID

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, special tokens included (the size of an embedding table)."""

    @abc.abstractmethod
    def pieces(self, text: str) -> list[str]:
        """The token strings of `text`, one per id of `encode(text)` (heatmap axis labels)."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS (batching adds them)."""

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode` of many texts as two arrays: every text's ids one after the other (int32)
        and the number of ids of each text (int64), what an Arrow list column is made of.
        Kinds with a faster batched encoder override it."""
        return flatten_ids([self.encode(text) for text in texts])

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of many texts, as lists (`encode_flat`'s speed)."""
        flat, lengths = self.encode_flat(texts)
        ids, ends = flat.tolist(), np.cumsum(lengths).tolist()
        return [ids[end - length : end] for end, length in zip(ends, lengths.tolist(), strict=True)]

    @abc.abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids` (a list or a (T,) tensor): stops at the first EOS, drops <pad> and <s>,
        writes ids outside the vocabulary as "<unk>"."""

    @abc.abstractmethod
    def ids_to_pieces(self, ids: Iterable[int]) -> list[str]:
        """The token string of every id (a list or a (T,) tensor), specials included, nothing
        dropped, so labels line up with attention rows/columns."""

    @abc.abstractmethod
    def piece_to_id(self, piece: str) -> int:
        """The id of a token string; UNK_ID when the vocabulary lacks it (and for the strings of
        <pad>, <s> and </s>, which text never produces)."""

    @abc.abstractmethod
    def pieces_to_text(self, pieces: list[str]) -> str:
        """Text of token strings; strings outside the vocabulary are written as they are."""

    def decode_extended(self, ids: Iterable[int], oovs: Sequence[str]) -> str:
        """`decode` for a copy model's output: ids >= vocab_size are source words the vocabulary
        lacks, written as `oovs[id - vocab_size]` (attnseq/data/extended_vocab.py). Stops at
        the first EOS and drops <pad> and <s>, as `decode` does; without extended ids the
        result is exactly `decode(ids)`."""
        ids = [int(token_id) for token_id in ids]
        size = self.vocab_size
        if all(token_id < size for token_id in ids):
            return self.decode(ids)
        pieces: list[str] = []
        for token_id in output_ids(ids):
            if token_id >= size:
                index = token_id - size
                pieces.append(oovs[index] if index < len(oovs) else UNK)
            else:
                pieces.extend(self.ids_to_pieces([token_id]))
        return self.pieces_to_text(pieces)

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild the tokenizer, as plain JSON-compatible values,
        with "kind" set to `self.kind`."""

    @classmethod
    @abc.abstractmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild from `state_dict()`."""

    @classmethod
    def check_state(cls, state: dict[str, Any], version: int) -> None:
        """ValueError unless `state` is a `state_dict()` of this kind in format `version`."""
        if state.get("kind") != cls.kind:
            raise ValueError(f"state is for a {state.get('kind')!r} tokenizer, not {cls.kind!r}")
        if state.get("version") != version:
            raise ValueError(
                f"unsupported {cls.kind} tokenizer state version {state.get('version')!r}; "
                f"this attnseq reads version {version}"
            )

    @classmethod
    @abc.abstractmethod
    def train(
        cls, texts: Iterable[str], *, min_freq: int = 1, max_size: int | None = None, **options: Any
    ) -> Self:
        """Build from training texts; `options` are kind-specific."""

    def save(self, path: str | Path) -> None:
        """Write `state_dict()` as a JSON file."""
        text = json.dumps(self.state_dict(), ensure_ascii=False, indent=1)
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        """Read a file written by `save`; the kind stored in it picks the class.

        Called on a subclass (e.g. `WordTokenizer.load`), the file must hold that kind.
        """
        tokenizer = load_tokenizer(path)
        if cls is not Tokenizer and not isinstance(tokenizer, cls):
            raise ValueError(f"{path} holds a {tokenizer.kind!r} tokenizer, not {cls.kind!r}")
        return tokenizer

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self.state_dict() == other.state_dict()

    def __hash__(self) -> int:
        return hash((self.kind, self.vocab_size))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class PretrainedTokenizer(Tokenizer):
    """One side of a pretrained model's tokenizer (marian_tokenizer.py, bart_tokenizer.py):
    built from the model's tokenizer files, the side ("source" or "target") and the id the
    decoder starts from, and its state is those three, so a checkpoint needs neither the
    model's folder nor the network. It is not trained."""

    files: dict[str, bytes]
    side: str

    @classmethod
    def transformers_tokenizer(cls, hf_class: Any, files: dict[str, bytes]) -> Any:
        """`hf_class.from_pretrained` of a folder that holds `files`, as it reads the model's.

        Raises:
            UserError: the files do not load.
        """
        with tempfile.TemporaryDirectory(prefix=f"attnseq-{cls.kind}-") as folder:
            for name, data in files.items():
                (Path(folder) / name).write_bytes(data)
            try:
                return hf_class.from_pretrained(folder, local_files_only=True)
            except Exception as error:  # broken files fail in many ways
                raise UserError(
                    f"the {cls.kind} tokenizer files do not load ({type(error).__name__}: {error})"
                ) from None

    def options(self) -> dict[str, Any]:
        """What the kind's constructor takes beyond the files, the side and the start id, as
        JSON values (a language, a vocabulary size); none by default."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        options = self.options()
        return {
            "kind": self.kind,
            "side": self.side,
            "version": PRETRAINED_STATE_VERSION,
            "bos_id": self.bos_id,
            "files": {
                name: base64.b64encode(data).decode("ascii") for name, data in self.files.items()
            },
            **({"options": options} if options else {}),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        cls.check_state(state, PRETRAINED_STATE_VERSION)
        files = state.get("files")
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise TypeError(f"{cls.kind} tokenizer state 'files' must map names to base64 text")
        decoded = {name: base64.b64decode(data) for name, data in files.items()}
        options = state.get("options", {})
        if not isinstance(options, dict):
            raise TypeError(f"{cls.kind} tokenizer state 'options' must be a mapping")
        side, bos_id = state.get("side", ""), int(state.get("bos_id", -1))
        return cls(decoded, side, bos_id, **options)  # type: ignore[call-arg]

    @classmethod
    def train(
        cls, texts: Iterable[str], *, min_freq: int = 1, max_size: int | None = None, **options: Any
    ) -> Self:
        raise ValueError(
            f"a {cls.kind} tokenizer comes with its pretrained model (attnseq/models/"
            "pretrained.py reads it); it is not trained"
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as its state: the transformers tokenizer inside reads files that are gone."""
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(type(self).from_state(state).__dict__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.side}, vocab_size={self.vocab_size})"


class TransformersTokenizer(PretrainedTokenizer):
    """A pretrained kind that is a transformers tokenizer (`_hf`) whose ids below `_known` have
    pieces: its text, pieces and ids are the tokenizer's own, the ids of `_specials` read as
    no text (bart_tokenizer.py, multilingual_tokenizer.py)."""

    _hf: Any
    _known: int
    _specials: set[int]

    def pieces(self, text: str) -> list[str]:
        """The tokenizer's pieces of `encode(text)`, one per id, special tokens included
        (BART's "Ġ" marks a piece that follows a space, sentencepiece's "▁" one that starts
        a word)."""
        return self.ids_to_pieces(self.encode(text))

    def decode(self, ids: Iterable[int]) -> str:
        """The tokenizer's text of the ids up to the first EOS (special tokens skipped, ids
        without a piece read as <unk>)."""
        kept = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == self.eos_id:
                break
            if token_id not in self._specials:
                kept.append(token_id if token_id < self._known else self.unk_id)
        return str(self._hf.decode(kept, skip_special_tokens=True))

    def ids_to_pieces(self, ids: Iterable[int]) -> list[str]:
        unk = str(self._hf.unk_token)
        pieces = []
        for token_id in ids:
            token_id = int(token_id)
            piece = self._hf.convert_ids_to_tokens(token_id) if token_id < self._known else None
            pieces.append(unk if piece is None else str(piece))
        return pieces

    def piece_to_id(self, piece: str) -> int:
        token_id = self._hf.convert_tokens_to_ids(piece)
        if token_id is None or token_id in self._specials:
            return self.unk_id
        return int(token_id)

    def pieces_to_text(self, pieces: list[str]) -> str:
        return str(self._hf.convert_tokens_to_string(list(pieces)))


class VocabTokenizer(Tokenizer):
    """A tokenizer that splits text into pieces and looks each one up in a `Vocabulary`."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab

    @abc.abstractmethod
    def join(self, pieces: list[str]) -> str:
        """Inverse of `pieces` for in-vocabulary text."""

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        # A literal "<s>" or "</s>" in the text must not become a control id (a stray EOS would
        # end decoding early), so specials typed in text are unknown tokens.
        return [
            UNK_ID if piece in SPECIAL_TOKENS else self.vocab.token_to_id(piece)
            for piece in self.pieces(text)
        ]

    def decode(self, ids: Iterable[int]) -> str:
        return self.join([self.vocab.id_to_token(token_id) for token_id in output_ids(ids)])

    def ids_to_pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.vocab.id_to_token(int(token_id)) for token_id in ids]

    def piece_to_id(self, piece: str) -> int:
        return UNK_ID if piece in SPECIAL_TOKENS else self.vocab.token_to_id(piece)

    def pieces_to_text(self, pieces: list[str]) -> str:
        return self.join(pieces)

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "version": STATE_VERSION,
            "specials": list(SPECIAL_TOKENS),
            "tokens": self.vocab.tokens,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        cls.check_state(state, STATE_VERSION)
        if list(state.get("specials", [])) != list(SPECIAL_TOKENS):
            raise ValueError(
                f"tokenizer special tokens {state.get('specials')!r} differ from "
                f"{list(SPECIAL_TOKENS)}"
            )
        tokens = state.get("tokens")
        if not isinstance(tokens, list):
            raise TypeError(f"tokenizer state 'tokens' must be a list, got {type(tokens).__name__}")
        return cls(Vocabulary(tokens))

    @classmethod
    def train(
        cls, texts: Iterable[str], *, min_freq: int = 1, max_size: int | None = None, **options: Any
    ) -> Self:
        """Vocabulary of the pieces of `texts`: by frequency, ties alphabetical; `max_size`
        regular tokens at most (specials on top)."""
        if options:
            raise ValueError(f"{cls.kind} tokenizer takes no options, got {sorted(options)}")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(cls._split(text))
        return cls(Vocabulary.from_counts(counts, min_freq=min_freq, max_size=max_size))

    def pieces(self, text: str) -> list[str]:
        return self._split(text)

    @staticmethod
    @abc.abstractmethod
    def _split(text: str) -> list[str]:
        """Text -> pieces; static so that `train` can use it before the vocabulary exists."""


_REGISTRY: dict[str, type[Tokenizer]] = {}


_T = TypeVar("_T", bound=type[Tokenizer])


def register_tokenizer(cls: _T) -> _T:
    """Class decorator: make `cls.kind` known to `train_tokenizer` and `tokenizer_from_state`."""
    if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
        raise ValueError(f"tokenizer kind {cls.kind!r} is already registered")
    _REGISTRY[cls.kind] = cls
    return cls


def tokenizer_kinds() -> tuple[str, ...]:
    """The registered tokenizer kinds."""
    return tuple(_REGISTRY)


@register_tokenizer
class CharTokenizer(VocabTokenizer):
    """Every character is a token, spaces included; decode concatenates."""

    kind = "char"

    @staticmethod
    def _split(text: str) -> list[str]:
        return list(text)

    def join(self, pieces: list[str]) -> str:
        return "".join(pieces)


@register_tokenizer
class WordTokenizer(VocabTokenizer):
    """Whitespace-separated words are tokens; decode joins with single spaces."""

    kind = "word"

    @staticmethod
    def _split(text: str) -> list[str]:
        return text.split()

    def join(self, pieces: list[str]) -> str:
        return " ".join(pieces)


def _registered(kind: object) -> type[Tokenizer]:
    if kind not in _REGISTRY:
        raise ValueError(
            f"unknown tokenizer kind {kind!r}; valid kinds: {', '.join(tokenizer_kinds())}"
        )
    return _REGISTRY[kind]  # type: ignore[index]


def train_tokenizer(
    kind: str,
    texts: Iterable[str],
    *,
    min_freq: int = 1,
    max_size: int | None = None,
    **options: Any,
) -> Tokenizer:
    """Build a tokenizer of `kind` ("char", "word", or any registered kind) from training texts.

    Deterministic: tokens are ranked by frequency, ties alphabetically. `min_freq` drops rarer
    tokens (they encode to <unk>); `max_size` caps the number of regular tokens.
    `options` go to the kind's `train` (for kinds that have any).
    """
    return _registered(kind).train(texts, min_freq=min_freq, max_size=max_size, **options)


def tokenizer_from_state(state: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from `Tokenizer.state_dict()`, dispatching on `state["kind"]`."""
    if not isinstance(state, dict):
        raise TypeError(f"tokenizer state must be a dict, got {type(state).__name__}")
    return _registered(state.get("kind")).from_state(state)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read a tokenizer saved with `Tokenizer.save`."""
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not a saved tokenizer (invalid JSON: {err})") from err
    return tokenizer_from_state(state)


@dataclass
class TokenizerPair:
    """The source and the target tokenizer: the same object when one vocabulary serves both
    (a joint sentencepiece model, or two tokenizers that came out identical, as for the symbol
    tasks), so that `joint` is the same whether the pair was trained or loaded from a
    checkpoint."""

    src: Tokenizer
    tgt: Tokenizer

    def __post_init__(self) -> None:
        if self.src is not self.tgt and self.src.state_dict() == self.tgt.state_dict():
            self.tgt = self.src

    @property
    def joint(self) -> bool:
        """One vocabulary for both sides: the model may share their embeddings."""
        return self.src is self.tgt

    def state(self) -> dict[str, Any]:
        """{"src": state, "tgt": state}: plain values, safe for torch.load(weights_only=True)."""
        return {"src": self.src.state_dict(), "tgt": self.tgt.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "TokenizerPair":
        src = tokenizer_from_state(state["src"])
        # A joint model stored twice comes back as one object, as it was trained.
        tgt = src if state["tgt"] == state["src"] else tokenizer_from_state(state["tgt"])
        return cls(src, tgt)
