"""The transformer as a pointer-generator (See, Liu & Manning 2017, section 2.2, carried over to the
transformer as in Gehrmann et al. 2018, "Bottom-Up Abstractive Summarization", EMNLP, section 2).

A transformer has H cross-attention distributions per decoder layer. The copy distribution is the
head average of one chosen layer's cross-attention (`copy_layer`, Python indexing: -1 = the last):

    a^t = (1/H) sum_h a^{t,h}_{copy_layer}                                    (B, T, S)

and the pieces of p_gen = sigmoid(w_c^T c_t + w_s^T s_t + w_x^T x_t + b) (models/copy.py) are
    c_t = sum_i a_i^t m_i     the encoder output (memory) averaged with that same attention,
    s_t                       the decoder's final output (after the final LayerNorm),
    x_t                       the embedded decoder input (scaled embedding + position).

The copy layer always takes the explicit attention path (it needs its weights), the other layers
keep the fused kernel unless weights are asked for.

Coverage is a loss only here: the coverage loss sum_i min(a_i^t, c_i^t) (eq. 12) of the copy
layer's head-averaged attention, with c^t = sum_{t' < t} a^{t'}, goes to `extras`; the coverage
vector is not fed into the attention scores (dot-product heads have no tanh layer to add
w_c c_i to, and adding it would break the fused path). It discourages the copy layer from
attending to the same source positions again, which is what the copy distribution and the
repetition it causes depend on.

Extended ids (>= V) are read as <unk> when they come back as decoder inputs. The decoder state is
the transformer's plus "src_ext" (B, S) and "n_oov" (an int) with copy.

Shapes: B batch, S source length, T target length, V target vocabulary, L layers, H heads.
"""

from typing import Any

import torch
from torch import Tensor

from attnseq.models.copy import (
    GenerationProbability,
    coverage_loss,
    extended_log_probs,
    teacher_forced_coverage,
)
from attnseq.models.positional import make_positions
from attnseq.models.seq2seq import DecoderState, Seq2SeqOutput
from attnseq.models.transformer import TransformerSeq2Seq


class PointerGeneratorTransformer(TransformerSeq2Seq):
    """`TransformerSeq2Seq` with a copy distribution and/or a coverage loss (module docstring).

    Args:
        src_vocab_size, tgt_vocab_size, pad_id, bos_id, eos_id: as for `TransformerSeq2Seq`.
        unk_id: the target vocabulary's <unk>, fed back in place of an extended id.
        copy: mix the copy distribution into the output.
        coverage: return the coverage loss of the copy layer.
        copy_layer: the decoder layer whose head-averaged cross-attention is used, -L..L-1.
        **options: every keyword argument of `TransformerSeq2Seq`.

    Raises:
        ValueError: copy_layer outside the decoder stack.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        *,
        unk_id: int,
        copy: bool,
        coverage: bool,
        copy_layer: int = -1,
        **options: Any,
    ) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, pad_id, bos_id, eos_id, **options)
        layers = len(self.decoder_layers)
        if not -layers <= copy_layer < layers:
            raise ValueError(f"copy_layer={copy_layer} is not one of the {layers} decoder layers")
        self.copy_layer = copy_layer % layers
        self.unk_id = unk_id
        self.tgt_vocab_size = tgt_vocab_size
        self.copy = copy
        self.coverage = coverage
        if copy:
            self.generation = GenerationProbability(self.d_model, self.d_model, self.d_model)

    def _in_vocabulary(self, tokens: Tensor) -> Tensor:
        """Extended ids (>= V) -> <unk>: what the decoder reads when it copied a source word."""
        return tokens.masked_fill(tokens >= self.tgt_vocab_size, self.unk_id)

    def _mix(
        self,
        logits: Tensor,
        attention: Tensor,
        memory: Tensor,
        decoded: Tensor,
        inputs: Tensor,
        src_ext: Tensor,
        n_oov: int,
    ) -> tuple[Tensor, Tensor]:
        """log P over the extended vocabulary and p_gen, for (B, T, ...) tensors.

        Args:
            logits: (B, T, V); attention: (B, T, S) head-averaged copy layer; memory: (B, S,
                d_model); decoded: (B, T, d_model) s_t; inputs: (B, T, d_model) x_t.
        """
        context = torch.bmm(attention, memory)  # c_t: (B, T, d_model)
        z = self.generation(context, decoded, inputs)  # (B, T)
        return extended_log_probs(logits, attention, src_ext, n_oov, z), torch.sigmoid(z)

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        *,
        src_ext: Tensor | None = None,
        n_oov: int = 0,
    ) -> Seq2SeqOutput:
        """Teacher-forced pass; see `TransformerSeq2Seq.forward`.

        Returns:
            logits (B, T, V) or, with copy, log P (B, T, V + n_oov); extras "p_gen" (B, T) with
            copy, "coverage_loss" (B, T) with coverage, and the self-attention maps of
            `TransformerSeq2Seq` when weights are asked for.
        """
        if self.copy and src_ext is None:
            raise ValueError("a copy model needs src_ext, the source in the extended vocabulary")
        tgt_in = self._in_vocabulary(tgt_in)
        self._check_length(tgt_in.size(1))
        memory, src_mask, enc_weights = self.encode(src, src_lengths, need_weights)
        positions = make_positions(tgt_in.size(1), device=tgt_in.device)  # (T,)
        inputs = self._embed(tgt_in, self.tgt_embed, self.tgt_positions, positions)  # x_t
        x = inputs
        self_weights: list[Tensor] = []
        cross_weights: list[Tensor] = []
        copy_attention = None
        for index, layer in enumerate(self.decoder_layers):
            explicit = need_weights or index == self.copy_layer
            out = layer(x, layer.memory_kv(memory), src_mask, need_weights=explicit)
            x = out.output
            if index == self.copy_layer:
                assert out.cross_weights is not None
                copy_attention = out.cross_weights.mean(dim=1)  # (B, H, T, S) -> (B, T, S)
            if need_weights:
                # linear and performer self-attention return no weights: only cross-attention
                # (always explicit here) is guaranteed
                assert out.cross_weights is not None
                if out.self_weights is not None:
                    self_weights.append(out.self_weights)  # (B, H, T, T)
                cross_weights.append(out.cross_weights)  # (B, H, T, S)
        assert copy_attention is not None
        decoded = self.decoder_norm(x)  # s_t: (B, T, d_model)
        logits = self.output_proj(decoded)  # (B, T, V)
        extras: dict[str, Tensor] = {}
        if self.copy:
            assert src_ext is not None
            logits, extras["p_gen"] = self._mix(
                logits, copy_attention, memory, decoded, inputs, src_ext, n_oov
            )
        if self.coverage:
            coverage = teacher_forced_coverage(copy_attention)  # c^t: (B, T, S)
            extras["coverage_loss"] = coverage_loss(copy_attention, coverage)  # (B, T)
        if not need_weights:
            return Seq2SeqOutput(logits, None, extras)
        if self_weights:
            extras["decoder_self_attention"] = torch.stack(self_weights, dim=1)  # (B,L,H,T,T)
        if enc_weights:
            extras["encoder_self_attention"] = torch.stack(enc_weights, dim=1)  # (B,L,H,S,S)
        return Seq2SeqOutput(logits, torch.stack(cross_weights, dim=1), extras)

    def start_decoding(
        self,
        src: Tensor,
        src_lengths: Tensor,
        *,
        src_ext: Tensor | None = None,
        n_oov: int = 0,
    ) -> DecoderState:
        state = super().start_decoding(src, src_lengths)
        if self.copy:
            if src_ext is None:
                raise ValueError(
                    "a copy model needs src_ext, the source in the extended vocabulary"
                )
            state["src_ext"] = src_ext  # (B, S)
            state["n_oov"] = n_oov
        return state

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """`TransformerSeq2Seq.decode_step`; prev_tokens may hold extended ids (read as <unk>).
        With copy the first result is log P (B, V + n_oov) instead of logits (B, V)."""
        if not self.copy:
            return super().decode_step(self._in_vocabulary(prev_tokens), state, need_weights)
        prev_tokens = self._in_vocabulary(prev_tokens)
        step: Tensor = state["step"]  # (B,)
        length: int = state["length"] + 1  # an int: reading `step` would wait for the device
        self._check_length(length)
        positions = make_positions(1, step)  # (B, 1)
        inputs = self._embed(
            prev_tokens.unsqueeze(1), self.tgt_embed, self.tgt_positions, positions
        )
        x = inputs  # (B, 1, d_model)
        new_layers = []
        cross_weights: list[Tensor] = []
        copy_attention = None
        for index, (layer, cache) in enumerate(
            zip(self.decoder_layers, state["layers"], strict=True)
        ):
            out = layer(
                x,
                (cache["cross_k"], cache["cross_v"]),
                state["memory_mask"],
                past_self=cache,
                need_weights=need_weights or index == self.copy_layer,
            )
            x = out.output
            new_layers.append({**cache, **(out.self_cache or {})})
            if index == self.copy_layer:
                assert out.cross_weights is not None
                copy_attention = out.cross_weights.mean(dim=1)  # (B, 1, S)
            if need_weights:
                assert out.cross_weights is not None
                cross_weights.append(out.cross_weights.squeeze(2))  # (B, H, S)
        assert copy_attention is not None
        decoded = self.decoder_norm(x)  # (B, 1, d_model)
        logits = self.output_proj(decoded)  # (B, 1, V)
        log_probs, _ = self._mix(
            logits,
            copy_attention,
            state["memory"],
            decoded,
            inputs,
            state["src_ext"],
            state["n_oov"],
        )
        attention = torch.stack(cross_weights, dim=1) if need_weights else None  # (B, L, H, S)
        new_state = {**state, "step": step + 1, "length": length, "layers": new_layers}
        return log_probs.squeeze(1), attention, new_state
