"""The RNN encoder-decoder as a pointer-generator with coverage (See, Liu & Manning 2017, "Get To
The Point: Summarization with Pointer-Generator Networks", ACL; sections 2.2-2.3).

`PointerGeneratorRNN` is `RNNSeq2Seq` (models/rnn.py, Bahdanau or Luong decoder, unchanged) with
two optional additions; the formulas are in models/copy.py and attention/additive.py, what both
families' pointer models share in models/pointer.py:

- copy: at every step p_gen = sigmoid(w_c^T c_t + w_s^T s_t + w_x^T x_t + b) from the context
  c_t, the top decoder state s_t (after this step's RNN update; Bahdanau: s_i, Luong: h_t) and the
  embedded decoder input x_t; the output is log P(w) over the extended vocabulary
  (V + n_oov ids, `extended_log_probs`), in place of the logits.
- coverage: the decoder state carries c^t = sum_{t' < t} a^{t'} (B, S); it enters the additive
  score (e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t)) and gives the per-step coverage loss
  sum_i min(a_i^t, c_i^t) in `extras["coverage_loss"]` (B, T). Being part of the incremental
  state, it is reordered with the beams by `reorder_state`.

Extended ids (>= V) never reach an embedding: as decoder inputs they are read as <unk>
(pointer.py). With neither addition the model is exactly `RNNSeq2Seq`: the base
parameters are created first, from the same random stream, so the same seed gives the same
weights, and build_model returns a plain `RNNSeq2Seq` then anyway.

Decoder state: that of `RNNSeq2Seq` plus "coverage" (B, S) with coverage, "src_ext" (B, S) and
"n_oov" (an int, passed through by `reorder_state`) with copy.

Shapes: B batch, S source length, T target length, E encoder output size, H decoder hidden size,
V target vocabulary.
"""

from typing import Any

import torch
from torch import Tensor

from attnseq.attention.additive import AdditiveAttention, CoverageAttention
from attnseq.attention.luong import ConcatAttention
from attnseq.models.copy import GenerationProbability, coverage_loss, extended_log_probs
from attnseq.models.pointer import PointerGenerator, PointerParts
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.seq2seq import DecoderState, Seq2SeqOutput, Vocabularies


class PointerGeneratorRNN(PointerGenerator, RNNSeq2Seq):
    """`RNNSeq2Seq` with a copy distribution and/or coverage (module docstring).

    Args:
        vocab: as for `RNNSeq2Seq`.
        **options: copy and coverage (`PointerGenerator`; coverage needs an additive or concat
            global score) and every keyword argument of `RNNSeq2Seq` (attention, style, sizes).

    Raises:
        ValueError: copy or coverage without attention, or coverage with another score.
    """

    def __init__(self, vocab: Vocabularies, **options: Any) -> None:
        super().__init__(vocab, **options)
        if self.word_values is not None:
            raise ValueError(
                "copy and coverage read the annotations: values='embeddings' is not supported"
            )
        if self.attention is None:
            raise ValueError("copy and coverage need attention, the model has none")
        if self.coverage:
            if not isinstance(self.attention, (AdditiveAttention, ConcatAttention)):
                raise ValueError(
                    "coverage enters the additive score (See et al. 2017, eq. 11): it needs "
                    f"an additive or concat score, not {type(self.attention).__name__}"
                )
            self.attention = CoverageAttention(self.attention)
        if self.copy:
            self.generation = GenerationProbability(
                self.encoder.output_size, self.hidden, self.embedding.embedding_dim
            )

    def _encode(self, src: Tensor, src_lengths: Tensor) -> dict[str, Tensor]:
        state = super()._encode(src, src_lengths)
        if self.coverage:
            state["coverage"] = state["annotations"].new_zeros(src.shape)  # c^0 = 0: (B, S)
        return state

    def _attend(
        self, query: Tensor, state: dict[str, Tensor], positions: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        if not self.coverage:
            return super()._attend(query, state, positions)
        annotations = state["annotations"]
        return self.attention(
            query,
            annotations,
            annotations,
            state["mask"],
            prepared_keys=state["keys"],
            coverage=state["coverage"],  # (B, S): this step's c^t
        )

    def _step(
        self, prev_tokens: Tensor, state: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        pre_output, weights, new_state = super()._step(prev_tokens, state)
        if self.coverage:
            assert weights is not None
            new_state["coverage"] = state["coverage"] + weights  # c^{t+1} = c^t + a^t
        return pre_output, weights, new_state

    def _p_gen_logit(
        self, weights: Tensor, annotations: Tensor, top: Tensor, inputs: Tensor
    ) -> Tensor:
        """z of p_gen (B, [T]) from weights (B, [T,] S), annotations (B, S, E), top states
        (B, [T,] H) and decoder inputs (B, [T,] emb); c_t = sum_i a_i h_i is the step's
        context, the same bmm the attention computes."""
        one_step = weights.dim() == 2
        rows = weights.unsqueeze(1) if one_step else weights  # (B, T, S)
        context = torch.bmm(rows, annotations)  # (B, T, E)
        return self.generation(context.squeeze(1) if one_step else context, top, inputs)

    # ------------------------------------------------------------------ Seq2Seq interface
    def pointer_forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool
    ) -> PointerParts:
        """Teacher-forced pass, one decoder step at a time (coverage needs the previous steps);
        attention (B, T, S) if asked for."""
        state = self._encode(src, src_lengths)
        outputs, all_weights, tops, losses = [], [], [], []
        for t in range(tgt_in.size(1)):
            pre, weights, new_state = self._step(tgt_in[:, t], state)
            assert weights is not None
            if self.coverage:
                losses.append(coverage_loss(weights, state["coverage"]))  # (B,)
            outputs.append(pre)
            all_weights.append(weights)
            tops.append(new_state["hidden"][:, -1])  # s_t: (B, H)
            state = new_state
        weights = torch.stack(all_weights, dim=1)  # (B, T, S)
        logits = self.output(self.dropout(torch.stack(outputs, dim=1)))  # (B, T, V)
        extras: dict[str, Tensor] = {}
        if self.coverage:
            extras["coverage_loss"] = torch.stack(losses, dim=1)  # (B, T)
        z = None
        if self.copy:
            inputs = self.dropout(self.embedding(tgt_in))  # x_t: (B, T, emb)
            z = self._p_gen_logit(weights, state["annotations"], torch.stack(tops, dim=1), inputs)
        output = Seq2SeqOutput(logits, weights if need_weights else None, extras)
        return PointerParts(output, weights, z)

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """One step; prev_tokens may hold extended ids (read as <unk>). With copy, the first
        result is log P (B, V + n_oov) instead of logits (B, V)."""
        prev_tokens = self._in_vocabulary(prev_tokens)
        pre_output, weights, new_state = self._step(prev_tokens, state)
        assert weights is not None
        # the same dropout as forward: a no-op when decoding (eval mode), and in training mode
        # a step-by-step pass computes what forward computes (scripts/check_loss_curve.py)
        logits = self.output(self.dropout(pre_output))  # (B, V)
        if self.copy:
            top = new_state["hidden"][:, -1]  # s_t: (B, H)
            inputs = self.dropout(self.embedding(prev_tokens))  # x_t, as in forward: (B, emb)
            z = self._p_gen_logit(weights, state["annotations"], top, inputs)
            logits = extended_log_probs(logits, weights, state["src_ext"], state["n_oov"], z)
        return logits, weights if need_weights else None, new_state
