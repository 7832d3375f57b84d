"""Every model variant the config can build, enumerated from the config's Enums, with one tiny
word-level batch to train it on: what the precision matrix (training/test_precision_matrix.py)
and the device check (models/test_device_neutral.py) run through each family and attention kind.

The variants vary the keys that pick a model class or an attention computation: every RNN score
under every window from both decoder styles, both cells, the attention values, hierarchical
attention, hard attention (each mode and top-k) and the pointer-generator (copy, coverage) of
both families, and every transformer self-attention kind, with and without decoder
self-attention, with persistent memory and the convolution sublayer. A new Enum member is a new
variant. Combinations that `validate` refuses are skipped with its message as the reason. The
default run takes a cover of the values (`DEFAULT_VARIANTS`), `-m slow` every variant.

The batch holds sentence breaks and speaker turns (hierarchical attention has several segments
per source) and words the tokenizers never saw (a copy model has out-of-vocabulary source words
to copy, and target labels in its extended vocabulary).
"""

import functools
import itertools

import pytest
import torch
from helpers import tiny_config

from attnseq.config.choices import (
    AttentionKind,
    AttentionValues,
    DecoderStyle,
    HardMode,
    Hierarchy,
    ModelFamily,
    RNNCell,
    Score,
    SparsePattern,
    Window,
)
from attnseq.config.schema import TrainConfig
from attnseq.data.batching import Batch, collate
from attnseq.data.extended_vocab import extend_examples
from attnseq.data.loader import TokenCounts
from attnseq.data.prepare import PreparedData, prepare_data, train_tokenizers
from attnseq.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from attnseq.errors import UserError
from attnseq.models.loading import model_for
from attnseq.models.seq2seq import Seq2Seq

PAIRS = [
    ("the cat sat . The dog ran ! Mr. Smith came home .", "cats sat and dogs ran"),
    ("#Person1#: where is it ? #Person2#: here it is .", "it is here"),
    ("a small dog runs . It runs fast .", "the dog runs fast"),
    ("birds fly high . Fish swim deep .", "birds fly , fish swim"),
    ("she reads a book . He writes a letter .", "reading and writing"),
    ("Zurich is big . Bern is small .", "Zurich is big"),  # unseen by the tokenizers
]
# word tokens; small windows, blocks, strides, projections and features, so that the sparse
# and approximate kinds really are sparse or approximate on sources of 8-13 words (the
# transformer's own keys with the transformer: a run of the other family refuses them)
SETTINGS = (
    "data.tokenizer=word",
    "data.max_src_len=16",
    "data.max_tgt_len=16",
    "model.max_positions=16",
    "model.dropout=0.0",
    "model.attention.D=2",
)
RNN = ("model.family=rnn",)
TRANSFORMER = (
    "model.family=transformer",
    "model.attention.stride=3",
    "model.attention.summary=1",
    "model.attention.proj_dim=8",
    "model.attention.features=16",
    "model.attention.block_size=4",
)


def _copy(copy: bool, coverage: bool) -> tuple[str, ...]:
    """The pointer-generator's keys; with coverage its loss term counts too."""
    return (f"model.copy={copy}", f"model.coverage={coverage}") + (
        ("optim.coverage_lambda=1.0",) if coverage else ()
    )


def _rnn_variants() -> dict[str, tuple[str, ...]]:
    variants: dict[str, tuple[str, ...]] = {}
    for style, score, window in itertools.product(DecoderStyle, Score, Window):
        variants[f"rnn-{style.name}-{score.name}-{window.name}"] = (
            *RNN,
            f"model.decoder={style.name}",
            f"model.attention.score={score.name}",
            f"model.attention.window={window.name}",
        )
    for cell in RNNCell:
        variants[f"rnn-{cell.name}-2-layers"] = (
            *RNN,
            f"model.rnn.cell={cell.name}",
            "model.rnn.layers=2",
        )
    for style in DecoderStyle:
        decoder = (*RNN, f"model.decoder={style.name}")
        for values in AttentionValues:
            variants[f"rnn-{style.name}-values-{values.name}"] = (
                *decoder,
                f"model.attention.values={values.name}",
            )
        for hierarchy, copy in itertools.product(Hierarchy, (False, True)):
            variants[f"rnn-{style.name}-hierarchy-{hierarchy.name}{'-copy' * copy}"] = (
                *decoder,
                f"model.attention.hierarchy={hierarchy.name}",
                *_copy(copy, copy),
            )
    return variants


def _transformer_variants() -> dict[str, tuple[str, ...]]:
    variants: dict[str, tuple[str, ...]] = {}
    for kind, decoder_self in itertools.product(AttentionKind, (False, True)):
        variants[f"transformer-{kind.name}{'-decoder-self' * decoder_self}"] = (
            *TRANSFORMER,
            f"model.attention.kind={kind.name}",
            f"model.attention.decoder_self={decoder_self}",
        )
    for pattern in SparsePattern:
        variants[f"transformer-strided-{pattern.name}-pattern"] = (
            *TRANSFORMER,
            "model.attention.kind=strided",
            f"model.attention.pattern={pattern.name}",
            "model.attention.decoder_self=true",
        )
    variants["transformer-memory"] = (
        *TRANSFORMER,
        "model.attention.memory_slots=2",
        "model.attention.memory_in_cross=true",
    )
    variants["transformer-convolution"] = (*TRANSFORMER, "model.conv_kernel=3")
    return variants


def _shared_variants() -> dict[str, tuple[str, ...]]:
    """Hard attention and the pointer-generator, in both families (and both RNN decoders)."""
    variants: dict[str, tuple[str, ...]] = {}
    families = {
        f"rnn-{style.name}": (*RNN, f"model.decoder={style.name}") for style in DecoderStyle
    }
    families[ModelFamily.transformer.name] = TRANSFORMER
    for (family, base), hard, k in itertools.product(families.items(), HardMode, (1, 2)):
        variants[f"{family}-hard-{hard.name}-top{k}"] = (
            *base,
            f"model.attention.hard={hard.name}",
            f"model.attention.hard_k={k}",
        )
    for (family, base), (copy, coverage) in itertools.product(
        families.items(), ((True, False), (False, True), (True, True))
    ):
        name = "-".join(key for key, on in (("copy", copy), ("coverage", coverage)) if on)
        variants[f"{family}-{name}"] = (*base, *_copy(copy, coverage))
    return variants


VARIANTS: dict[str, tuple[str, ...]] = {
    **_rnn_variants(),
    **_transformer_variants(),
    **_shared_variants(),
}


def _value_cover(variants: dict[str, tuple[str, ...]]) -> set[str]:
    """The variants, in order, that each bring an override no earlier one brought: every
    value the matrix varies is in one of them (a third of the matrix)."""
    seen: set[str] = set()
    cover = set()
    for name, overrides in variants.items():
        if not seen.issuperset(overrides):
            cover.add(name)
            seen.update(overrides)
    return cover


DEFAULT_VARIANTS = _value_cover(VARIANTS)


def variant_params() -> list:
    """VARIANTS as pytest parameters: the default run takes DEFAULT_VARIANTS, `-m slow` the
    rest of the matrix."""
    return [
        pytest.param(name, marks=() if name in DEFAULT_VARIANTS else pytest.mark.slow)
        for name in VARIANTS
    ]


def variant_config(name: str) -> TrainConfig:
    """The tiny config of variant `name`, built once per test process (callers must not modify
    it); skips the test with validation's message when the combination is refused."""
    config = _config_or_refusal(name)
    if isinstance(config, str):
        pytest.skip(f"the config refuses {name}: {config}")
    return config


@functools.cache
def _config_or_refusal(name: str) -> TrainConfig | str:
    """Composing and validating a config takes longer than training the variant: once each."""
    try:
        return tiny_config(*SETTINGS, *VARIANTS[name])
    except UserError as refusal:
        return str(refusal)


@functools.cache
def word_data() -> PreparedData:
    """PAIRS encoded with word tokenizers trained on all but the last pair."""
    cfg = tiny_config(*SETTINGS).data
    tokenizers = train_tokenizers(cfg, PAIRS[:-1])
    return prepare_data(cfg, 0, tokenizers=tokenizers, pairs={"train": PAIRS})


def variant_model(cfg: TrainConfig) -> Seq2Seq:
    """The model `cfg` describes over `word_data()`'s vocabularies, seeded by `cfg.seed`."""
    torch.manual_seed(cfg.seed)
    return model_for(cfg, word_data().tokenizers)


def variant_batch(cfg: TrainConfig) -> tuple[Batch, TokenCounts]:
    """All of PAIRS as one batch (a `CopyBatch` for a copy model) and its token counts."""
    data = word_data()
    examples, tokenizers = data.examples["train"], data.tokenizers
    extended = None
    if cfg.model.copy:
        extended = extend_examples(data.pairs["train"], examples, tokenizers.src, tokenizers.tgt)
    indices = list(range(len(examples)))
    batch = collate(
        examples, indices, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, extended=extended
    )
    return batch, TokenCounts(batch.n_src_tokens, batch.n_tgt_tokens, batch.n_padded_tokens)
