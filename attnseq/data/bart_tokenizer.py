"""The tokenizer of a Hugging Face BART model: transformers' `BartTokenizer` itself (byte-level
BPE of vocab.json and merges.txt, run by the `tokenizers` library), so the ids are exactly its
ids; one vocabulary serves source and target, and its special ids are the model's.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnseq.data.tokenizers import TransformersTokenizer, flatten_ids, register_tokenizer
from attnseq.errors import UserError

SIDES = ("source", "target")
# the files BartTokenizer reads: these two always, the others where the model has them
REQUIRED_FILES = ("vocab.json", "merges.txt")
OPTIONAL_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
WORD_START = "\u0120"  # "Ġ", byte-level BPE's mark of a piece that follows a space


def read_tokenizer_files(folder: Path) -> dict[str, bytes]:
    """The tokenizer files of a BART model folder by name; UserError for a missing one."""
    names = REQUIRED_FILES + OPTIONAL_FILES
    files = {name: (folder / name).read_bytes() for name in names if (folder / name).is_file()}
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        raise UserError(
            f"{folder} lacks the BART tokenizer's {', '.join(missing)} (a BART model folder "
            f"holds {', '.join(REQUIRED_FILES)} beside config.json)"
        )
    return files


def _transformers_bart() -> Any:
    try:
        from transformers import BartTokenizer as HFBartTokenizer
    except ImportError:
        raise UserError(
            "a BART tokenizer needs transformers and tokenizers: pip install 'attnseq[hf]'"
        ) from None
    return HFBartTokenizer


@register_tokenizer
class BartTokenizer(TransformersTokenizer):
    """One side of a Hugging Face `BartTokenizer`: both sides encode `<s> text`, the source
    side with the `</s>` that ends it, as BART's encoder reads it; the target side leaves
    `</s>` to batching, and the decoder starts from `bos_id` (the model's
    decoder_start_token_id, `</s>`). The state holds the tokenizer files, so a checkpoint
    needs neither the model's folder nor the network.

    Args:
        files: the tokenizer files by name (`read_tokenizer_files`).
        side: "source" or "target".
        bos_id: the id the decoder starts from.

    Raises:
        UserError: transformers is missing, or the files do not make a BART tokenizer.
    """

    kind = "bart"

    def __init__(self, files: dict[str, bytes], side: str, bos_id: int) -> None:
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        self.files = dict(files)
        self.side = side
        self._hf = self.transformers_tokenizer(_transformers_bart(), self.files)
        self._size = self._known = len(self._hf)
        specials = {}
        for role in ("pad", "unk", "eos", "bos"):
            token = getattr(self._hf, f"{role}_token")
            token_id = None if token is None else self._hf.convert_tokens_to_ids(str(token))
            if token_id is None or not 0 <= token_id < self._size:
                raise UserError(f"the BART tokenizer's vocab.json lacks its {role} token {token!r}")
            specials[role] = int(token_id)
        if not 0 <= bos_id < self._size:
            raise UserError(
                f"the decoder start id {bos_id} is outside the {self._size} ids of vocab.json"
            )
        # the model's own ids, where every other kind has attnseq's fixed class ones
        self.pad_id = specials["pad"]  # type: ignore[misc]
        self.unk_id = specials["unk"]  # type: ignore[misc]
        self.eos_id = specials["eos"]  # type: ignore[misc]
        self.bos_id = bos_id  # type: ignore[misc]
        self.start_id = specials["bos"]  # <s>, the first token of every encoded text
        self._specials = {self.pad_id, self.bos_id, self.eos_id, self.start_id}

    @property
    def vocab_size(self) -> int:
        return self._size

    def encode(self, text: str) -> list[int]:
        """BartTokenizer's ids of `text` (`<s> ... </s>`), without the closing `</s>` on the
        target side (batching appends it there)."""
        ids = list(self._hf(text)["input_ids"])
        return ids if self.side == "source" else ids[:-1]

    def encode_flat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """`encode` of many texts in one call of the tokenizers library."""
        rows = [list(ids) for ids in self._hf(list(texts))["input_ids"]]
        return flatten_ids(rows if self.side == "source" else [ids[:-1] for ids in rows])
