"""Model families behind one interface (seq2seq.py) and the factory that builds them."""

from attnseq.config.checks import encoder_output_size
from attnseq.config.schema import ModelConfig, ModelFamily, Score
from attnseq.models.seq2seq import Seq2Seq, Seq2SeqOutput


def build_model(
    cfg: ModelConfig,
    src_vocab_size: int,
    tgt_vocab_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    joint_vocabulary: bool = False,
    unk_id: int = 1,
) -> Seq2Seq:
    """Construct the model a config describes (weights freshly initialised).

    `joint_vocabulary`: source and target share one tokenizer (e.g. a joint sentencepiece
    model). With `cfg.tie_embeddings` the source embedding, the target embedding and the output
    projection are then one matrix (Press & Wolf 2017; Vaswani et al. 2017, section 3.4), as in
    the peer toolkits' joint-BPE setups.

    With `cfg.copy` or `cfg.coverage` the model is the pointer-generator subclass of its family
    (models/rnn_pointer.py, models/transformer_pointer.py); `unk_id` (the same id, 1, for every
    attnseq tokenizer) is what it feeds back after emitting a copied source word.
    """
    share_src_tgt = cfg.tie_embeddings and joint_vocabulary
    pointer = cfg.copy or cfg.coverage
    if cfg.family is ModelFamily.transformer:
        from attnseq.attention.efficient import SelfAttentionOptions
        from attnseq.models.transformer import TransformerSeq2Seq

        attention = cfg.attention
        self_attention = SelfAttentionOptions(
            kind=attention.kind.value,
            window=attention.D,
            stride=attention.stride,
            pattern=attention.pattern.value,
            summary=attention.summary,
            global_tokens=attention.global_tokens,
            proj_dim=attention.proj_dim,
            max_length=cfg.max_positions,  # linformer's n
            features=attention.features,
        )
        transformer_class: type[TransformerSeq2Seq] = TransformerSeq2Seq
        extra: dict = {}
        if pointer:
            from attnseq.models.transformer_pointer import PointerGeneratorTransformer

            transformer_class = PointerGeneratorTransformer
            extra = {
                "unk_id": unk_id,
                "copy": cfg.copy,
                "coverage": cfg.coverage,
                "copy_layer": cfg.copy_layer,
            }
        return transformer_class(
            src_vocab_size,
            tgt_vocab_size,
            pad_id,
            bos_id,
            eos_id,
            d_model=cfg.d_model,
            heads=cfg.heads,
            enc_layers=cfg.enc_layers,
            dec_layers=cfg.dec_layers,
            ff_dim=cfg.ff_dim,
            dropout=cfg.dropout,
            attention_dropout=cfg.attention_dropout,
            norm=cfg.norm.value,
            positions=cfg.positions.value,
            max_positions=cfg.max_positions,
            tie_embeddings=cfg.tie_embeddings,
            share_src_tgt_embeddings=share_src_tgt,
            self_attention=self_attention,
            decoder_self_attention=attention.decoder_self,
            **extra,
        )

    from attnseq.attention import build_attention
    from attnseq.models.rnn import RNNSeq2Seq

    directions = 2 if cfg.rnn.bidirectional else 1
    enc_hidden = cfg.enc_hidden if cfg.enc_hidden is not None else cfg.hidden // directions
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
    rnn_class: type[RNNSeq2Seq] = RNNSeq2Seq
    rnn_extra: dict = {}
    if pointer:
        from attnseq.models.rnn_pointer import PointerGeneratorRNN

        rnn_class = PointerGeneratorRNN
        rnn_extra = {"unk_id": unk_id, "copy": cfg.copy, "coverage": cfg.coverage}
    return rnn_class(
        src_vocab_size,
        tgt_vocab_size,
        pad_id,
        bos_id,
        eos_id,
        attention=attention,
        style=cfg.decoder.value,
        emb_dim=cfg.emb_dim,
        enc_hidden=enc_hidden,
        hidden=cfg.hidden,
        layers=cfg.rnn.layers,
        bidirectional=cfg.rnn.bidirectional,
        cell=cfg.rnn.cell.value,
        init_hidden=cfg.rnn.init_hidden.value,
        dropout=cfg.dropout,
        input_feeding=cfg.input_feeding,
        tie_embeddings=cfg.tie_embeddings,
        share_src_tgt_embeddings=share_src_tgt,
        **rnn_extra,
    )


__all__ = ["Seq2Seq", "Seq2SeqOutput", "build_model"]
