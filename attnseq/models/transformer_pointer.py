"""The transformer as a pointer-generator (See, Liu & Manning 2017, section 2.2, carried over to the
transformer as in Gehrmann et al. 2018, "Bottom-Up Abstractive Summarization", EMNLP, section 2).

A transformer has H cross-attention distributions per decoder layer. The copy distribution is the
head average of one chosen layer's cross-attention (`copy_layer`, Python indexing: -1 = the last):

    a^t = (1/H) sum_h a^{t,h}_{copy_layer}                                    (B, T, S)

(with pruned heads, models/head_mask.py, the average over the kept ones:
sum_h xi_h a^{t,h} / sum_h xi_h, so that a pruned head leaves the copy distribution too)

and the pieces of p_gen = sigmoid(w_c^T c_t + w_s^T s_t + w_x^T x_t + b) (models/copy.py) are
    c_t = sum_i a_i^t m_i     the encoder output (memory) averaged with that same attention,
    s_t                       the decoder's final output (after the final LayerNorm),
    x_t                       the embedded decoder input (scaled embedding + position).

The decoder runs as in `TransformerSeq2Seq` (`teacher_forced`, `incremental_step`); this model
only asks it for the copy layer's weights (that layer alone takes the explicit attention path
unless weights are asked for) and mixes in the copy distribution. Everything else, the attention
it returns included, is the base model's.

Coverage is a loss only here: the coverage loss sum_i min(a_i^t, c_i^t) (eq. 12) of the copy
layer's head-averaged attention, with c^t = sum_{t' < t} a^{t'}, goes to `extras`; the coverage
vector is not fed into the attention scores (dot-product heads have no tanh layer to add
w_c c_i to, and adding it would break the fused path). It discourages the copy layer from
attending to the same source positions again, which is what the copy distribution and the
repetition it causes depend on.

Extended ids (>= V) are read as <unk> when they come back as decoder inputs (pointer.py).

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
from attnseq.models.pointer import PointerGenerator, PointerParts
from attnseq.models.seq2seq import DecoderState, Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.models.transformer_layers import DecoderPass


class PointerGeneratorTransformer(PointerGenerator, TransformerSeq2Seq):
    """`TransformerSeq2Seq` with a copy distribution and/or a coverage loss (module docstring).

    Args:
        vocab: as for `TransformerSeq2Seq`.
        copy_layer: the decoder layer whose head-averaged cross-attention is used, -L..L-1.
        **options: copy and coverage (`PointerGenerator`) and every keyword argument of
            `TransformerSeq2Seq`.

    Raises:
        ValueError: copy_layer outside the decoder stack.
    """

    def __init__(self, vocab: Vocabularies, *, copy_layer: int = -1, **options: Any) -> None:
        super().__init__(vocab, **options)
        layers = len(self.decoder_layers)
        if not -layers <= copy_layer < layers:
            raise ValueError(f"copy_layer={copy_layer} is not one of the {layers} decoder layers")
        self.copy_layer = copy_layer % layers
        if self.copy:
            self.generation = GenerationProbability(self.d_model, self.d_model, self.d_model)

    def _copy_attention(self, decoder: DecoderPass) -> Tensor:
        """a^t: the copy layer's cross-attention averaged over its kept heads (head mask xi),
        (B, H, T, S) -> (B, T, S)."""
        weights = decoder.layers[self.copy_layer].cross_weights
        assert weights is not None  # run_decoder was asked for them (weights_of)
        xi = self.decoder_layers[self.copy_layer].cross_attn.head_mask.to(weights.dtype)  # (H,)
        # mean * H / sum(xi): exactly the plain mean when every xi is 1
        kept = (weights * xi.view(1, -1, 1, 1)).mean(dim=1)
        return kept * (xi.numel() / xi.sum().clamp_min(1e-6))

    def _p_gen_logit(self, attention: Tensor, memory: Tensor, decoder: DecoderPass) -> Tensor:
        """z of p_gen, (B, T), from the copy attention (B, T, S), the memory (B, S, d_model) and
        the decoder pass (its s_t `decoded` and x_t `inputs`, (B, T, d_model))."""
        context = torch.bmm(attention, memory)  # c_t: (B, T, d_model)
        return self.generation(context, decoder.decoded, decoder.inputs)

    def pointer_forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool
    ) -> PointerParts:
        output, decoder, memory = self.teacher_forced(
            src, src_lengths, tgt_in, need_weights, weights_of=self.copy_layer
        )
        copy_attention = self._copy_attention(decoder)  # (B, T, S)
        if self.coverage:
            coverage = teacher_forced_coverage(copy_attention)  # c^t: (B, T, S)
            output.extras["coverage_loss"] = coverage_loss(copy_attention, coverage)  # (B, T)
        z = self._p_gen_logit(copy_attention, memory, decoder) if self.copy else None
        return PointerParts(output, copy_attention, z)

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """`TransformerSeq2Seq.decode_step`; prev_tokens may hold extended ids (read as <unk>).
        With copy the first result is log P (B, V + n_oov) instead of logits (B, V)."""
        prev_tokens = self._in_vocabulary(prev_tokens)
        if not self.copy:
            return super().decode_step(prev_tokens, state, need_weights)
        decoder, attention, new_state = self.incremental_step(
            prev_tokens, state, need_weights, weights_of=self.copy_layer
        )
        logits = self.output_proj(decoder.decoded)  # (B, 1, V)
        copy_attention = self._copy_attention(decoder)  # (B, 1, S)
        z = self._p_gen_logit(copy_attention, state["memory"], decoder)  # (B, 1)
        src_ext, n_oov = state["src_ext"], state["n_oov"]
        log_probs = extended_log_probs(logits, copy_attention, src_ext, n_oov, z)
        return log_probs.squeeze(1), attention, new_state
