"""The data layer: text pairs (generated, local files, the Hub), tokenizers, the prepared-data
cache and batches under a token budget; docs/internals/data.md is the tour."""

# imported to register their kinds: "bart", "marian", "m2m100", "nllb", "mbart50" and
# "sentencepiece"
from attnseq.data import (  # noqa: F401
    bart_tokenizer,
    marian_tokenizer,
    multilingual_tokenizer,
    sentencepiece_tokenizer,
)
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
