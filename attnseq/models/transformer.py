"""The transformer encoder-decoder (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS)
behind the `Seq2Seq` interface; its layers are transformer_layers.py. Teacher forcing
(`decoder_pass`) and incremental decoding (`incremental_step`) both run the decoder stack
through `run_decoder`, whose result subclasses (pointer_generator.py, hard_attention.py) build
on.

Shapes: B batch, S source length, T target length, V target vocabulary, L layers, H heads,
d_k = d_model / H.
"""

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnseq.attention.efficient import for_layer
from attnseq.attention.masks import padding_mask
from attnseq.attention.mechanism import KeyValue
from attnseq.config.choices import Norm
from attnseq.config.schema import AttentionConfig
from attnseq.models.positional import TABLE_KINDS, build_positional_encoding, make_positions
from attnseq.models.seq2seq import (
    DecoderState,
    Seq2Seq,
    Seq2SeqOutput,
    TeacherForcing,
    Vocabularies,
)
from attnseq.models.transformer_layers import (
    DecoderLayer,
    DecoderPass,
    LayerOptions,
    TransformerEncoder,
    final_norm,
)


class TransformerSeq2Seq(Seq2Seq):
    """Transformer encoder-decoder (Vaswani et al. 2017) behind the `Seq2Seq` interface.

    Args:
        vocab: vocabulary sizes and special ids.
        d_model: model width (paper base: 512).
        heads: attention heads H; must divide d_model (attention/multihead.py checks it).
        enc_layers, dec_layers: layers in the encoder and decoder stacks.
        ff_dim: feed-forward inner size d_ff.
        dropout: residual, embedding and feed-forward dropout P_drop.
        attention_dropout: dropout on attention weights.
        norm: "pre" (LayerNorm before each sublayer, final LayerNorm) or "post" (the paper's).
        positions: "sinusoidal", "learned", "sinusoidal_split" or "sinusoidal_fairseq"
            positional encodings (positional.py).
        max_positions: longest source/target with learned positions; linformer's n.
        tie_embeddings: the output projection reuses the target embedding matrix.
        share_src_tgt_embeddings: one embedding for source and target (equal vocab sizes).
        self_attention: the encoder self-attention mechanism, the config's model.attention
            (its kind and parameters: attention/efficient.py); None = full.
        decoder_self_attention: use it for decoder self-attention too (causal kinds only).
        memory_slots, memory_in_cross, conv_kernel: see `LayerOptions`.
        scaled_attention: every attention divides q . k by sqrt(d_k) (section 3.2.1); False =
            unscaled dot products.
        activation, activation_dropout: the feed-forward nonlinearity and the dropout on it
            (`LayerOptions`).
        scale_embeddings: multiply token embeddings by sqrt(d_model) (section 3.4).
        output_bias: the output projection has a bias (a pretrained model's logits bias).
        position_offset: learned or fairseq positions: the table's rows before position 0's
            (BART's and M2M100's 2).
        embed_norm: a LayerNorm on embeddings plus positions, before their dropout, on both
            sides (BART's layernorm_embedding).

    Raises:
        ValueError: for inconsistent sizes or options, e.g. a decoder use of a kind that
            cannot be causal.
    """

    def __init__(
        self,
        vocab: Vocabularies,
        *,
        d_model: int = 256,
        heads: int = 4,
        enc_layers: int = 3,
        dec_layers: int = 3,
        ff_dim: int = 1024,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        norm: str = "pre",
        positions: str = "sinusoidal",
        max_positions: int = 1024,
        tie_embeddings: bool = True,
        share_src_tgt_embeddings: bool = False,
        self_attention: AttentionConfig | None = None,
        decoder_self_attention: bool = False,
        memory_slots: int = 0,
        memory_in_cross: bool = False,
        conv_kernel: int = 0,
        scaled_attention: bool = True,
        activation: str = "relu",
        activation_dropout: float | None = None,
        scale_embeddings: bool = True,
        output_bias: bool = False,
        position_offset: int = 0,
        embed_norm: bool = False,
    ) -> None:
        super().__init__(vocab.pad_id, vocab.bos_id, vocab.eos_id)
        _check_options((enc_layers, dec_layers), norm)
        if share_src_tgt_embeddings:
            vocab.check_shareable()
        self.d_model = d_model
        self.heads = heads
        self.max_positions = max_positions
        self.positions = positions
        self.position_offset = position_offset
        self.embed_scale = math.sqrt(d_model) if scale_embeddings else 1.0
        self._build_embeddings(vocab, share_src_tgt_embeddings, dropout)
        # None without: the state dict of a model without it has no such entries
        self.src_embed_norm = nn.LayerNorm(d_model) if embed_norm else None
        self.tgt_embed_norm = nn.LayerNorm(d_model) if embed_norm else None

        options = LayerOptions(
            d_model=d_model,
            heads=heads,
            ff_dim=ff_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            pre_norm=norm == "pre",
            memory_slots=memory_slots,
            memory_in_cross=memory_in_cross,
            conv_kernel=conv_kernel,
            max_positions=max_positions,
            scaled=scaled_attention,
            activation=activation,
            activation_dropout=activation_dropout,
        )
        self.encoder = TransformerEncoder(enc_layers, options, self_attention)
        decoder_self = self_attention if decoder_self_attention else None
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(options, for_layer(decoder_self, enc_layers + index))
            for index in range(dec_layers)
        )
        self.decoder_norm = final_norm(options)

        self.output_proj = nn.Linear(d_model, vocab.tgt_size, bias=output_bias)
        if output_bias:
            nn.init.zeros_(self.output_proj.bias)
        if tie_embeddings:
            self.output_proj.weight = self.tgt_embed.weight  # section 3.4: shared weight matrix
        else:
            nn.init.normal_(self.output_proj.weight, mean=0.0, std=d_model**-0.5)

    def _build_embeddings(self, vocab: Vocabularies, shared: bool, dropout: float) -> None:
        """Token embeddings (one matrix for source and target if `shared`), positional
        encodings and the embedding dropout (sections 3.4, 3.5, 5.4)."""
        self.tgt_embed = self._make_embedding(vocab.tgt_size, self.d_model, vocab.pad_id)
        self.src_embed = (
            self.tgt_embed
            if shared
            else self._make_embedding(vocab.src_size, self.d_model, vocab.pad_id)
        )
        self.src_positions = build_positional_encoding(
            self.positions, self.d_model, self.max_positions, self.position_offset
        )
        self.tgt_positions = build_positional_encoding(
            self.positions, self.d_model, self.max_positions, self.position_offset
        )
        self.embed_dropout = nn.Dropout(dropout)

    @staticmethod
    def _make_embedding(vocab_size: int, d_model: int, pad_id: int) -> nn.Embedding:
        """Embedding with N(0, d_model^-0.5) init: times sqrt(d_model) it has unit scale."""
        embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(embedding.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            embedding.weight[pad_id].zero_()
        return embedding

    def _embed(
        self,
        tokens: Tensor,
        embedding: nn.Embedding,
        encoding: nn.Module,
        positions: Tensor,
        norm: nn.Module | None,
    ) -> Tensor:
        """Dropout(sqrt(d_model) * E[tokens] + PE(positions)) (sections 3.4, 3.5, 5.4);
        without the sqrt(d_model) when the model does not scale its embeddings, and with
        `norm` (a LayerNorm, or None) on the sum before the dropout.

        Args:
            tokens: (B, N) token ids.
            positions: (N,) or (B, N) positions of those tokens.

        Returns:
            (B, N, d_model).
        """
        scaled = embedding(tokens) * self.embed_scale  # (B, N, d_model)
        summed = scaled + encoding(positions).to(scaled.dtype)
        return self.embed_dropout(summed if norm is None else norm(summed))

    def _check_length(self, length: int) -> None:
        """Learned (and split sinusoidal) positions only exist up to max_positions; fail with
        a clear message."""
        if self.positions in TABLE_KINDS and length > self.max_positions:
            raise ValueError(
                f"sequence of length {length} exceeds max_positions={self.max_positions} "
                f"of the {self.positions} positional encoding"
            )

    def encode(
        self, src: Tensor, src_lengths: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Run the encoder.

        Args:
            src: (B, S) source ids, right-padded.
            src_lengths: (B,) real source lengths.
            need_weights: explicit attention path, return the self-attention weights.

        Returns:
            memory (B, S, d_model), source mask (B, S) bool, and L weights (B, H, S, S).
        """
        self._check_length(src.size(1))
        src_mask = padding_mask(src_lengths, src.size(1))  # (B, S)
        positions = make_positions(src.size(1), device=src.device)  # (S,)
        x = self._embed(src, self.src_embed, self.src_positions, positions, self.src_embed_norm)
        memory, weights = self.encoder(x, src_mask, need_weights)
        return memory, src_mask, weights

    def run_decoder(
        self,
        tokens: Tensor,
        positions: Tensor,
        memory_kvs: Sequence[KeyValue],
        memory_mask: Tensor,
        caches: Sequence[DecoderState] | None = None,
        need_weights: bool = False,
        weights_of: int | None = None,
    ) -> DecoderPass:
        """The decoder stack over T new target positions: teacher forcing and incremental steps.

        Args:
            tokens: (B, T) target ids fed to the decoder.
            positions: (T,) or (B, T) their positions.
            memory_kvs: per layer, its cross-attention keys/values (B, H, S, d_k) each.
            memory_mask: (B, S) bool, True at real source tokens.
            caches: per layer, the self-attention state of the earlier positions; None for
                teacher forcing from position 0.
            need_weights: explicit attention path in every layer, return its weights.
            weights_of: a layer whose cross-attention weights are needed whatever
                `need_weights` says (it alone takes the explicit path).
        """
        inputs = self._embed(
            tokens, self.tgt_embed, self.tgt_positions, positions, self.tgt_embed_norm
        )
        x = inputs  # (B, T, d_model)
        outputs = []
        for index, (layer, memory_kv) in enumerate(
            zip(self.decoder_layers, memory_kvs, strict=True)
        ):
            explicit = need_weights or index == weights_of
            past = None if caches is None else caches[index]
            out = layer(x, memory_kv, memory_mask, past_self=past, need_weights=explicit)
            x = out.output
            outputs.append(out)
        return DecoderPass(inputs, self.decoder_norm(x), outputs)

    def decoder_pass(
        self, inputs: TeacherForcing, weights_of: int | None = None
    ) -> tuple[Seq2SeqOutput, DecoderPass, Tensor]:
        """The teacher-forced pass, with what subclasses build on: the decoder pass and the
        memory (B, S, d_model). `weights_of`: as in `run_decoder`; the output holds attention
        only with need_weights."""
        self._check_length(inputs.tgt_in.size(1))
        need_weights = inputs.need_weights
        memory, src_mask, enc_weights = self.encode(inputs.src, inputs.src_lengths, need_weights)
        positions = make_positions(inputs.tgt_in.size(1), device=inputs.tgt_in.device)  # (T,)
        memory_kvs = [layer.memory_kv(memory) for layer in self.decoder_layers]
        decoder = self.run_decoder(
            inputs.tgt_in, positions, memory_kvs, src_mask, None, need_weights, weights_of
        )
        output = Seq2SeqOutput(self.output_proj(decoder.decoded))  # logits (B, T, V)
        if not need_weights:
            return output, decoder, memory
        self_weights = [out.self_weights for out in decoder.layers if out.self_weights is not None]
        if self_weights:
            output.decoder_self_attention = torch.stack(self_weights, dim=1)  # (B, L, H, T, T)
        if enc_weights:
            output.encoder_self_attention = torch.stack(enc_weights, dim=1)  # (B, L, H, S, S)
        output.attention = torch.stack(decoder.cross_weights(), dim=1)  # (B, L, H, T, S)
        return output, decoder, memory

    def teacher_forced(self, inputs: TeacherForcing) -> Seq2SeqOutput:
        """The teacher-forced pass (`Seq2Seq.forward`); with `alignment` only that layer takes
        the explicit attention path."""
        alignment = inputs.alignment
        if alignment is None:
            return self.decoder_pass(inputs)[0]
        layer = alignment.layer % len(self.decoder_layers)
        output, decoder, _ = self.decoder_pass(inputs, layer)
        return alignment.attach(output, decoder.layers[layer].cross_weights)

    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        """Encode once and project the memory to every layer's cross-attention keys/values.

        Args:
            src: (B, S) source ids, right-padded.
            src_lengths: (B,) real source lengths.

        Returns:
            the state, tensors batch-first (so `Seq2Seq.reorder_state` can select rows):

                {
                    "memory":      (B, S, d_model) encoder output,
                    "memory_mask": (B, S) bool, True at real source tokens,
                    "step":        (B,) long, target tokens fed so far (the next position),
                    "length":      int, the same for every row (read without a device sync),
                    "layers": [    one dict per decoder layer
                        {"cross_k": (B, H, S, d_k), "cross_v": (B, H, S, d_k),  projected once
                         **the self-attention cache of the layer's mechanism (`empty_cache`)},
                    ],
                }

            The cache of full and strided attention: "self_k", "self_v" (B, H, t, d_k), growing
            by one per step; local: the last w of them; linear and performer: the running sums
            "self_kv" (B, H, F, d_k) and "self_k_sum" (B, H, F) (performer: "self_log_scale").
        """
        memory, src_mask, _ = self.encode(src, src_lengths)
        batch = src.size(0)
        layers = []
        for layer in self.decoder_layers:
            cross_k, cross_v = layer.memory_kv(memory)  # (B, H, S, d_k) each
            # the self-attention state before any target token (full: (B, H, 0, d_k) keys)
            empty = layer.self_attn.empty_cache(batch, cross_k)
            layers.append({"cross_k": cross_k, "cross_v": cross_v, **empty})
        step = torch.zeros(batch, dtype=torch.long, device=src.device)  # (B,)
        return {
            "memory": memory,
            "memory_mask": src_mask,
            "step": step,
            "length": 0,
            "layers": layers,
        }

    def incremental_step(
        self,
        prev_tokens: Tensor,
        state: DecoderState,
        need_weights: bool = False,
        weights_of: int | None = None,
    ) -> tuple[DecoderPass, Tensor | None, DecoderState]:
        """`decode_step` up to the decoder output: one target token per row, attending over
        the cached keys/values, O(t) per step.

        Args:
            prev_tokens: (B,) the previous token (BOS at the first step).
            state: from `start_decoding` or the previous step.
            need_weights, weights_of: as in `run_decoder`.

        Returns:
            the decoder pass over the one new position (T = 1), this step's cross-attention
            (B, L, H, S) with need_weights (else None), and the new state (the input state is
            not modified).
        """
        step: Tensor = state["step"]  # (B,)
        # read the length from the int, not from `step`, to avoid a device sync: every row has
        # fed the same number of tokens
        length: int = state["length"] + 1
        self._check_length(length)
        caches = state["layers"]
        decoder = self.run_decoder(
            prev_tokens.unsqueeze(1),  # (B, 1)
            make_positions(1, step),  # (B, 1)
            [(cache["cross_k"], cache["cross_v"]) for cache in caches],
            state["memory_mask"],
            caches,
            need_weights,
            weights_of,
        )
        new_layers = [
            {**cache, **(out.self_cache or {})}
            for cache, out in zip(caches, decoder.layers, strict=True)
        ]
        attention = None
        if need_weights:  # (B, H, 1, S) per layer -> (B, L, H, S)
            attention = torch.stack([w.squeeze(2) for w in decoder.cross_weights()], dim=1)
        new_state = {**state, "step": step + 1, "length": length, "layers": new_layers}
        return decoder, attention, new_state

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """Feed one target token per row (`incremental_step`).

        Returns:
            logits (B, V), cross-attention (B, L, H, S) or None, and the new state.
        """
        decoder, attention, new_state = self.incremental_step(prev_tokens, state, need_weights)
        logits = self.output_proj(decoder.decoded).squeeze(1)  # (B, 1, V) -> (B, V)
        return logits, attention, new_state


def _check_options(layers: tuple[int, int], norm: str) -> None:
    """Reject a stack without layers or an unknown norm placement with a message that says what
    would be valid. `layers` is (enc_layers, dec_layers); `norm` is a `Norm` value."""
    if min(layers) < 1:
        # weights are stacked per layer, and a decoder needs cross-attention to see the source
        enc_layers, dec_layers = layers
        raise ValueError(
            f"enc_layers and dec_layers must be at least 1, got {enc_layers} and {dec_layers}"
        )
    if norm not in {choice.value for choice in Norm}:
        raise ValueError(
            f"unknown norm {norm!r}; choose one of {', '.join(choice.value for choice in Norm)}"
        )
