"""The data layer: generated tasks, tokenizers, and batching by token budget.

- `generated`: seeded toy tasks (dates, reverse, copy, sort) that need no download.
- `tokenizers`: char and word tokenizers (and the interface others implement) with fixed
  special ids <pad>=0, <unk>=1, <s>=2, </s>=3.
- `batching`: `TokenBatchSampler` (length buckets under a token budget), `Batch` and
  `collate`.
"""

# imported to register their kinds, "marian" and "sentencepiece"
from attnseq.data import marian_tokenizer, sentencepiece_tokenizer  # noqa: F401
from attnseq.data.batching import (
    Batch,
    Example,
    TokenBatchSampler,
    collate,
    encode_pairs,
    example_lengths,
    iterate_batches,
)
from attnseq.data.generated import TASKS, make_splits, tokenizer_kind
from attnseq.data.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    CharTokenizer,
    Tokenizer,
    Vocabulary,
    WordTokenizer,
    load_tokenizer,
    register_tokenizer,
    tokenizer_from_state,
    tokenizer_kinds,
    train_tokenizer,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "TASKS",
    "UNK_ID",
    "Batch",
    "CharTokenizer",
    "Example",
    "TokenBatchSampler",
    "Tokenizer",
    "Vocabulary",
    "WordTokenizer",
    "collate",
    "encode_pairs",
    "example_lengths",
    "iterate_batches",
    "load_tokenizer",
    "make_splits",
    "register_tokenizer",
    "tokenizer_from_state",
    "tokenizer_kind",
    "tokenizer_kinds",
    "train_tokenizer",
]
