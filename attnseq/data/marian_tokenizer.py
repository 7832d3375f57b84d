"""The tokenizer of a Hugging Face Marian (OPUS-MT) model: transformers' `MarianTokenizer` itself,
one side of it per attnseq tokenizer, so the ids are exactly its ids (vocab.json's, not the
sentencepiece model's) and its special ids are the model's (docs/internals/data.md).
"""

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from attnseq.data.tokenizers import PretrainedTokenizer, register_tokenizer
from attnseq.errors import UserError

SIDES = ("source", "target")
# the files MarianTokenizer reads: these three always, the others where the model has them
REQUIRED_FILES = ("source.spm", "target.spm", "vocab.json")
OPTIONAL_FILES = ("target_vocab.json", "tokenizer_config.json", "special_tokens_map.json")
TOKENIZER_FILES = REQUIRED_FILES + OPTIONAL_FILES


def read_tokenizer_files(folder: Path) -> dict[str, bytes]:
    """The tokenizer files of a model folder by name; UserError for a missing required one
    (or target_vocab.json of a tokenizer_config.json with separate_vocabs)."""
    files = {
        name: (folder / name).read_bytes() for name in TOKENIZER_FILES if (folder / name).is_file()
    }
    missing = [name for name in REQUIRED_FILES if name not in files]
    if _separate_vocabs(files) and "target_vocab.json" not in files:
        missing.append("target_vocab.json (tokenizer_config.json has separate_vocabs)")
    if missing:
        raise UserError(
            f"{folder} lacks the Marian tokenizer's {', '.join(missing)} (a Marian model folder "
            f"holds {', '.join(REQUIRED_FILES)} beside config.json)"
        )
    return files


def _separate_vocabs(files: dict[str, bytes]) -> bool:
    """Whether tokenizer_config.json asks for a target vocabulary of its own."""
    if "tokenizer_config.json" not in files:
        return False
    config = _json(files, "tokenizer_config.json")
    return isinstance(config, dict) and bool(config.get("separate_vocabs", False))


def _json(files: dict[str, bytes], name: str) -> Any:
    try:
        return json.loads(files[name].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"the Marian tokenizer's {name} is not JSON ({error})") from None


def _vocabulary(files: dict[str, bytes], name: str) -> dict[str, int]:
    """A vocab.json: piece -> id, the ids 0 .. N - 1 each once."""
    vocab = _json(files, name)
    if not isinstance(vocab, dict) or not all(
        isinstance(piece, str) and isinstance(index, int) for piece, index in vocab.items()
    ):
        raise UserError(f"the Marian tokenizer's {name} is no mapping of pieces to ids")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise UserError(f"the Marian tokenizer's {name} does not number its pieces 0 .. N - 1")
    return vocab


def _transformers_marian() -> Any:
    try:
        from transformers import MarianTokenizer as HFMarianTokenizer
    except ImportError:
        raise UserError(
            "a Marian tokenizer needs transformers and sentencepiece: pip install 'attnseq[hf]'"
        ) from None
    return HFMarianTokenizer


@register_tokenizer
class MarianTokenizer(PretrainedTokenizer):
    """One side of a Hugging Face `MarianTokenizer`: the source side appends EOS, as Marian's
    encoder reads it; the target side leaves EOS to batching. The state holds the tokenizer
    files, so a checkpoint needs neither the model's folder nor the network.

    Args:
        files: the tokenizer files by name (`read_tokenizer_files`).
        side: "source" or "target".
        bos_id: the id the decoder starts from (the model's decoder_start_token_id).

    Raises:
        UserError: transformers is missing, or the files do not make a Marian tokenizer.
    """

    kind = "marian"

    def __init__(self, files: dict[str, bytes], side: str, bos_id: int) -> None:
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        self.files = dict(files)
        self.side = side
        self.separate_vocabs = _separate_vocabs(self.files)
        own = "target_vocab.json" if side == "target" and self.separate_vocabs else "vocab.json"
        self._stoi = _vocabulary(self.files, own)
        self._itos = {index: piece for piece, index in self._stoi.items()}
        self._hf = self.transformers_tokenizer(_transformers_marian(), self.files)
        specials = {}
        for role in ("pad", "unk", "eos"):
            token = str(getattr(self._hf, f"{role}_token"))
            if token not in self._stoi:
                raise UserError(f"the Marian tokenizer's {own} lacks its {role} token {token!r}")
            specials[role] = self._stoi[token]
        if not 0 <= bos_id < len(self._stoi):
            raise UserError(
                f"the decoder start id {bos_id} is outside the {len(self._stoi)} ids of {own}"
            )
        # the model's own ids, where every other kind has attnseq's fixed class ones
        self.pad_id = specials["pad"]  # type: ignore[misc]
        self.unk_id = specials["unk"]  # type: ignore[misc]
        self.eos_id = specials["eos"]  # type: ignore[misc]
        self.bos_id = bos_id  # type: ignore[misc]
        self._specials = {self.pad_id, self.bos_id, self.eos_id}

    @property
    def vocab_size(self) -> int:
        return len(self._stoi)

    def encode(self, text: str) -> list[int]:
        """MarianTokenizer's ids of `text`: with EOS on the source side, without it on the
        target side (batching appends it there)."""
        if self.side == "source":
            return list(self._hf(text)["input_ids"])
        return list(self._hf(text_target=text)["input_ids"][:-1])

    def pieces(self, text: str) -> list[str]:
        """MarianTokenizer's pieces, one per id of `encode` (a piece the vocabulary lacks as
        sentencepiece wrote it, so its word boundary shows; </s> on the source side)."""
        if self.side == "source":
            return [*self._hf.tokenize(text), str(self._hf.eos_token)]
        self._hf._switch_to_target_mode()  # what MarianTokenizer does for text_target
        try:
            return list(self._hf.tokenize(text))
        finally:
            self._hf._switch_to_input_mode()

    def decode(self, ids: Iterable[int]) -> str:
        """MarianTokenizer's text of the ids up to the first EOS (special tokens skipped)."""
        kept = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == self.eos_id:
                break
            if token_id not in self._specials:
                kept.append(token_id)
        if self.side == "target":
            return str(self._hf.decode(kept, skip_special_tokens=True))
        pieces = [self._itos.get(token_id, str(self._hf.unk_token)) for token_id in kept]
        return self.pieces_to_text([p for p in pieces if p not in self._hf.all_special_tokens])

    def ids_to_pieces(self, ids: Iterable[int]) -> list[str]:
        unk = str(self._hf.unk_token)
        return [self._itos.get(int(token_id), unk) for token_id in ids]

    def piece_to_id(self, piece: str) -> int:
        token_id = self._stoi.get(piece, self.unk_id)
        return self.unk_id if token_id in self._specials else token_id

    def pieces_to_text(self, pieces: list[str]) -> str:
        return str(self._hf.convert_tokens_to_string(list(pieces)))
