"""Model families behind one interface (seq2seq.py) and the factory that builds them: one builder
per family, each reading its part of `ModelConfig`."""

from typing import TYPE_CHECKING, Any

from attnseq.config.checks import encoder_output_size
from attnseq.config.choices import HardMode, Hierarchy, ModelFamily, Score
from attnseq.config.schema import ModelConfig
from attnseq.models.seq2seq import Seq2Seq, Seq2SeqOutput, Vocabularies

if TYPE_CHECKING:
    from attnseq.data.segments import SourceSegmenter

# imported to add their families to pretrained.FAMILIES and huggingface_export's
# EXPORT_FAMILIES: "bart", "m2m_100", "mbart"
from attnseq.models import (  # noqa: E402, F401
    bart_export,
    bart_family,
    m2m100_family,
    mbart_family,
    multilingual_export,
)

# keyword arguments of both families' models that ModelConfig holds under the same name
_SHARED_OPTIONS = ("dropout", "tie_embeddings")
_TRANSFORMER_OPTIONS = (
    "d_model",
    "heads",
    "enc_layers",
    "dec_layers",
    "ff_dim",
    "attention_dropout",
    "max_positions",
    "position_offset",
    "embed_norm",
)
_RNN_OPTIONS = ("emb_dim", "hidden", "input_feeding")


def build_model(
    cfg: ModelConfig, vocab: Vocabularies, segmenter: "SourceSegmenter | None" = None
) -> Seq2Seq:
    """Construct the model a config describes (weights freshly initialised).

    With a joint vocabulary (`vocab.joint`: source and target share one tokenizer, e.g. a joint
    sentencepiece model) and `cfg.tie_embeddings`, the source embedding, the target embedding
    and the output projection are one matrix (Press & Wolf 2017; Vaswani et al. 2017, section
    3.4), as in the peer toolkits' joint-BPE setups. `cfg.share_src_tgt_embeddings`, when set,
    decides the source/target sharing instead (a pretrained model says it).

    With `cfg.copy` or `cfg.coverage` the model is the pointer-generator subclass of its family
    (models/pointer_generator.py); it feeds `vocab.unk_id` back after
    emitting a copied source word.

    With `cfg.attention.hierarchy` the RNN is the hierarchical model of
    models/rnn_hierarchical.py; `segmenter` (the source tokenizer's, data/segments.py) cuts its
    sources into segments.
    With `cfg.attention.hard` the model is the hard-attention subclass of its family
    (models/hard_attention.py).
    """
    options: dict[str, Any] = {name: getattr(cfg, name) for name in _SHARED_OPTIONS}
    options["share_src_tgt_embeddings"] = cfg.tie_embeddings and vocab.joint
    if cfg.share_src_tgt_embeddings is not None:  # set: whatever the tokenizers
        options["share_src_tgt_embeddings"] = cfg.share_src_tgt_embeddings
    if cfg.family is ModelFamily.transformer:
        return _build_transformer(cfg, vocab, options)
    return _build_rnn(cfg, vocab, options, segmenter)


def _build_transformer(cfg: ModelConfig, vocab: Vocabularies, options: dict[str, Any]) -> Seq2Seq:
    """A `TransformerSeq2Seq` (its pointer-generator with copy or coverage) with the
    self-attention kind of `cfg.attention`, which the model reads whole (its kind and that
    kind's parameters; linformer's n is max_positions)."""
    from attnseq.models.transformer import TransformerSeq2Seq

    attention = cfg.attention
    options.update({name: getattr(cfg, name) for name in _TRANSFORMER_OPTIONS})
    options.update(
        norm=cfg.norm.value,
        positions=cfg.positions.value,
        self_attention=attention,
        decoder_self_attention=attention.decoder_self,
        memory_slots=attention.memory_slots,
        memory_in_cross=attention.memory_in_cross,
        conv_kernel=cfg.conv_kernel,
        scaled_attention=attention.scaled,
        activation=cfg.activation.value,
        activation_dropout=cfg.activation_dropout,
        scale_embeddings=cfg.scale_embeddings,
        output_bias=cfg.output_bias,
    )
    if cfg.attention.hard is not HardMode.none:
        from attnseq.models.hard_attention import HardAttentionTransformer

        hard = {"hard": cfg.attention.hard.value, "hard_k": cfg.attention.hard_k}
        return HardAttentionTransformer(vocab, **hard, **options)
    if not (cfg.copy or cfg.coverage):
        return TransformerSeq2Seq(vocab, **options)
    from attnseq.models.pointer_generator import PointerGeneratorTransformer

    return PointerGeneratorTransformer(
        vocab, copy=cfg.copy, coverage=cfg.coverage, copy_layer=cfg.copy_layer, **options
    )


def _build_rnn(
    cfg: ModelConfig,
    vocab: Vocabularies,
    options: dict[str, Any],
    segmenter: "SourceSegmenter | None" = None,
) -> Seq2Seq:
    """An `RNNSeq2Seq` (its pointer-generator with copy or coverage) with the decoder style
    and score of `cfg`."""
    from attnseq.attention import build_attention
    from attnseq.models.rnn import RNNSeq2Seq

    directions = 2 if cfg.rnn.bidirectional else 1
    attention = None
    if cfg.attention.score is not Score.none:
        attention = build_attention(
            cfg.attention.score.value,
            cfg.hidden,
            encoder_output_size(cfg),
            attn_dim=cfg.attention.attn_dim or cfg.hidden,
            window=cfg.attention.window.value,
            D=cfg.attention.D,
            max_src_len=cfg.max_positions,
        )
    options.update({name: getattr(cfg, name) for name in _RNN_OPTIONS})
    options.update(
        attention=attention,
        style=cfg.decoder.value,
        enc_hidden=cfg.enc_hidden if cfg.enc_hidden is not None else cfg.hidden // directions,
        layers=cfg.rnn.layers,
        bidirectional=cfg.rnn.bidirectional,
        cell=cfg.rnn.cell.value,
        init_hidden=cfg.rnn.init_hidden.value,
        values=cfg.attention.values.value,
    )
    if cfg.attention.hierarchy is not Hierarchy.none:
        from attnseq.models.rnn_hierarchical import build_hierarchical_rnn

        return build_hierarchical_rnn(cfg, vocab, options, segmenter)
    if cfg.attention.hard is not HardMode.none:
        from attnseq.models.hard_attention import HardAttentionRNN

        hard = {"hard": cfg.attention.hard.value, "hard_k": cfg.attention.hard_k}
        return HardAttentionRNN(vocab, **hard, **options)
    if not (cfg.copy or cfg.coverage):
        return RNNSeq2Seq(vocab, **options)
    from attnseq.models.pointer_generator import PointerGeneratorRNN

    return PointerGeneratorRNN(vocab, copy=cfg.copy, coverage=cfg.coverage, **options)


__all__ = ["Seq2Seq", "Seq2SeqOutput", "Vocabularies", "build_model"]
