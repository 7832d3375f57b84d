"""The tokenizers of Hugging Face's multilingual models, transformers' own (M2M100Tokenizer,
NllbTokenizer, MBart50Tokenizer), one side of one per attnseq tokenizer: a text is its language's
code token, its pieces and `</s>`, the language chosen by data.src_lang_code and
data.tgt_lang_code (`use_language_codes`), so the ids are exactly transformers'.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from attnseq.config.schema import TrainConfig
from attnseq.data.tokenizers import (
    TokenizerPair,
    TransformersTokenizer,
    flatten_ids,
    register_tokenizer,
)
from attnseq.errors import UserError

SIDES = ("source", "target")
SHOWN_CODES = 6  # the known codes an unknown one's message lists
# the files every kind reads where the model has them
COMMON_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def read_tokenizer_files(folder: Path, kind: type["LanguageCodeTokenizer"]) -> dict[str, bytes]:
    """The tokenizer files of a model folder by name; UserError when those `kind` needs are
    missing (all of `required`, one of `one_of`)."""
    names = kind.required + kind.one_of + COMMON_FILES
    files = {name: (folder / name).read_bytes() for name in names if (folder / name).is_file()}
    missing = [name for name in kind.required if name not in files]
    if kind.one_of and not any(name in files for name in kind.one_of):
        missing.append(" or ".join(kind.one_of))
    if missing:
        raise UserError(
            f"{folder} lacks the {kind.family} tokenizer's {', '.join(missing)} (beside "
            "config.json)"
        )
    return files


class LanguageCodeTokenizer(TransformersTokenizer):
    """One side of a multilingual model's tokenizer: both sides encode `CODE text </s>`, CODE
    the side's language; the target side leaves `</s>` to batching, and the decoder starts
    from `bos_id` (the model's decoder_start_token_id, `</s>`), the target code forced next.
    The state holds the tokenizer files, the language and the vocabulary size, so a
    checkpoint needs neither the model's folder nor the network.

    Args:
        files: the tokenizer files by name (`read_tokenizer_files`).
        side: "source" or "target".
        bos_id: the id the decoder starts from.
        language: the side's language code; None = the files' own (tokenizer_config.json's
            src_lang or tgt_lang; a target side may have none until one is chosen).
        vocab_size: the model's embedding rows, at least the tokenizer's ids (a model may
            have more: M2M100's made-up words, NLLB's padding rows); None = the ids.

    Raises:
        UserError: transformers is missing, the files do not make the tokenizer, an unknown
            language, or a vocabulary size below the tokenizer's ids.
    """

    family: ClassVar[str]  # the model family's name in messages
    required: ClassVar[tuple[str, ...]] = ()  # files the kind needs, all of them
    one_of: ClassVar[tuple[str, ...]] = ()  # files the kind needs, one of them
    transformers_class: ClassVar[str]

    def __init__(
        self,
        files: dict[str, bytes],
        side: str,
        bos_id: int,
        language: str | None = None,
        vocab_size: int | None = None,
    ) -> None:
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        self.files = dict(files)
        self.side = side
        self._hf = self.transformers_tokenizer(self._transformers(), self.files)
        self.codes = self.language_codes(self._hf)  # {code: id}
        if not self.codes:
            raise UserError(
                f"the {self.family} tokenizer files give it no language codes; the model's "
                "tokenizer.json or tokenizer_config.json has them"
            )
        specials = {}
        for role in ("pad", "unk", "eos"):
            token = getattr(self._hf, f"{role}_token")
            token_id = None if token is None else self._hf.convert_tokens_to_ids(str(token))
            if token_id is None:
                raise UserError(f"the {self.family} tokenizer lacks its {role} token {token!r}")
            specials[role] = int(token_id)
        start = self._hf.convert_tokens_to_ids("<s>")  # no text holds it
        # ids the tokenizer has a piece for (M2M100's codes follow vocab.json's pieces)
        self._known = max(len(self._hf), max(self.codes.values(), default=0) + 1)
        self._size = self._known if vocab_size is None else int(vocab_size)
        if self._size < self._known:
            raise UserError(
                f"the {self.family} tokenizer has {self._known} ids, more than the model's "
                f"vocabulary of {self._size}: the tokenizer is not this model's"
            )
        if not 0 <= bos_id < self._size:
            raise UserError(
                f"the decoder start id {bos_id} is outside the {self._size} ids of the vocabulary"
            )
        # the model's own ids, where every other kind has attnseq's fixed class ones
        self.pad_id = specials["pad"]  # type: ignore[misc]
        self.unk_id = specials["unk"]  # type: ignore[misc]
        self.eos_id = specials["eos"]  # type: ignore[misc]
        self.bos_id = bos_id  # type: ignore[misc]
        # no text: the special tokens and the codes (decoded text leaves the code out)
        self._specials = {self.pad_id, self.bos_id, self.eos_id}
        self._specials.update([] if start in (None, self.unk_id) else [int(start)])
        self._specials.update(self.codes.values())
        own = self._hf.src_lang if side == "source" else self._hf.tgt_lang
        self.language: str | None = None
        if language is not None or own is not None:
            self.set_language(language if language is not None else str(own))

    @classmethod
    def _transformers(cls) -> Any:
        try:
            import transformers
        except ImportError:
            raise UserError(
                f"a {cls.family} tokenizer needs transformers and sentencepiece: pip install "
                "'attnseq[hf]'"
            ) from None
        return getattr(transformers, cls.transformers_class)

    @classmethod
    def language_codes(cls, hf: Any) -> dict[str, int]:
        """{code: id} of every language the transformers tokenizer `hf` knows: its special
        tokens other than the roles' (NLLB's eng_Latn, mBART-50's en_XX), each an id of its
        own; UserError when one reads as <unk> (files without the codes' ids)."""
        roles = {str(token) for token in hf.special_tokens_map.values() if isinstance(token, str)}
        codes = {}
        for token in hf.all_special_tokens:
            if str(token) in roles:
                continue
            token_id = hf.convert_tokens_to_ids(str(token))
            if token_id is None or token_id == hf.unk_token_id:
                raise UserError(
                    f"the {cls.family} tokenizer files give the language code {token} no id of "
                    "its own (it reads as <unk>); the model's tokenizer.json has them"
                )
            codes[str(token)] = int(token_id)
        return codes

    def options(self) -> dict[str, Any]:
        return {"language": self.language, "vocab_size": self._size}

    def set_language(self, code: str) -> None:
        """Encode this side as language `code` from now on; UserError for a code the tokenizer
        does not know (one line, some known codes)."""
        if code not in self.codes:
            known = ", ".join(list(self.codes)[:SHOWN_CODES])
            raise UserError(
                f"unknown language code {code!r} of the model's {self.family} tokenizer; it "
                f"knows {len(self.codes)} codes: {known} ..."
            )
        self.language = code
        if self.side == "source":
            self._hf.src_lang = code
        else:
            self._hf.tgt_lang = code

    def language_id(self) -> int:
        """The id of the side's language code (the target's is every output's first token);
        UserError when none is chosen."""
        if self.language is None:
            raise UserError(
                f"the model's {self.family} tokenizer names no {self.side} language "
                "(tokenizer_config.json has none): choose one with data."
                f"{'src' if self.side == 'source' else 'tgt'}_lang_code"
            )
        return self.codes[self.language]

    @property
    def vocab_size(self) -> int:
        return self._size

    def _encoded(self, texts: str | list[str]) -> Any:
        """transformers' input ids of `texts` on this side, `CODE ... </s>`."""
        self.language_id()  # a UserError without a language
        if self.side == "source":
            return self._hf(texts)["input_ids"]
        return self._hf(text_target=texts)["input_ids"]

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids of `text`, without the closing `</s>` on the target side
        (batching appends it there)."""
        ids = list(self._encoded(text))
        return ids if self.side == "source" else ids[:-1]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode` of many texts in one call of the tokenizer."""
        rows = [list(ids) for ids in self._encoded(list(texts))]
        return flatten_ids(rows if self.side == "source" else [ids[:-1] for ids in rows])


@register_tokenizer
class M2M100Tokenizer(LanguageCodeTokenizer):
    """M2M100's tokenizer: vocab.json's ids of sentencepiece pieces, the codes `__en__` after
    them (chosen as `en`)."""

    kind = "m2m100"
    family = "M2M100"
    required = ("vocab.json", "sentencepiece.bpe.model")
    transformers_class = "M2M100Tokenizer"

    @classmethod
    def language_codes(cls, hf: Any) -> dict[str, int]:
        return {str(code): int(token_id) for code, token_id in hf.lang_code_to_id.items()}

    def pieces(self, text: str) -> list[str]:
        """The code's token, sentencepiece's pieces of `text` (a piece vocab.json lacks as
        sentencepiece wrote it, so its word boundary shows) and `</s>` on the source side."""
        code = self.ids_to_pieces([self.language_id()])
        end = [str(self._hf.eos_token)] if self.side == "source" else []
        return [*code, *self._hf.tokenize(text), *end]


@register_tokenizer
class NllbTokenizer(LanguageCodeTokenizer):
    """NLLB's tokenizer: sentencepiece's ids moved up by fairseq's one (<s> 0, <pad> 1, </s> 2,
    <unk> 3 first), the codes `eng_Latn` after the pieces."""

    kind = "nllb"
    family = "NLLB"
    one_of = ("tokenizer.json", "sentencepiece.bpe.model")
    transformers_class = "NllbTokenizer"


@register_tokenizer
class MBart50Tokenizer(LanguageCodeTokenizer):
    """mBART-50's tokenizer: NLLB's layout with the codes `en_XX`."""

    kind = "mbart50"
    family = "mBART-50"
    one_of = ("tokenizer.json", "sentencepiece.bpe.model")
    transformers_class = "MBart50Tokenizer"


def use_language_codes(cfg: TrainConfig, tokenizers: TokenizerPair) -> None:
    """Set the languages of a multilingual model's tokenizers to data.src_lang_code and
    data.tgt_lang_code (None: the tokenizer's own), and decoding.forced_first_token to the
    target code's id, what `generate` is given as forced_bos_token_id.

    Raises:
        UserError: a code for tokenizers without language codes, an unknown code, or no
            target language.
    """
    data = cfg.data
    for key, tokenizer in (("src_lang_code", tokenizers.src), ("tgt_lang_code", tokenizers.tgt)):
        code = getattr(data, key)
        if not isinstance(tokenizer, LanguageCodeTokenizer):
            if code is not None:
                raise UserError(
                    f"data.{key}={code}: the model's {tokenizer.kind} tokenizer has no language "
                    "codes (M2M100, NLLB and mBART-50 models have them)"
                )
        elif code is not None:
            tokenizer.set_language(code)
    if isinstance(tokenizers.src, LanguageCodeTokenizer):
        tokenizers.src.language_id()  # a UserError without a language
    if isinstance(tokenizers.tgt, LanguageCodeTokenizer):
        cfg.decoding.forced_first_token = tokenizers.tgt.language_id()
