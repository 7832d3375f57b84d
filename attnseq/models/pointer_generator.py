"""The pointer-generator with coverage (See, Liu & Manning 2017, "Get To The Point: Summarization
with Pointer-Generator Networks", ACL, sections 2.2-2.3) for both families: what they share
(`PointerGenerator`), the RNN (`PointerGeneratorRNN`) and the transformer
(`PointerGeneratorTransformer`; Gehrmann et al. 2018, "Bottom-Up Abstractive Summarization",
EMNLP, section 2). Extended ids (>= V) are the example's source words the target vocabulary
lacks (attnseq/data/extended_vocab.py).

Shapes: B batch, S source length, T target length, V target vocabulary, K = n_oov extended ids
(V + K in all), E encoder output size, H the RNN decoder's hidden size or the transformer's
heads.
"""

import abc
from dataclasses import replace
from typing import Any, NamedTuple, Unpack

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnseq.attention.additive import AdditiveAttention, CoverageAttention
from attnseq.attention.luong import ConcatAttention
from attnseq.attention.masks import padding_mask
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.seq2seq import (
    CopyInputs,
    DecoderState,
    Seq2Seq,
    Seq2SeqOutput,
    TeacherForcing,
    Vocabularies,
)
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.models.transformer_layers import DecoderPass


class GenerationProbability(nn.Module):
    """p_gen's logit z = w_c^T c_t + w_s^T s_t + w_x^T x_t + b_ptr (See et al. 2017, eq. 8).

    The three vectors w_c, w_s, w_x are one linear layer over the concatenation [c; s; x]
    (the same function); p_gen = sigmoid(z) is left to the caller, which needs log p_gen and
    log(1 - p_gen) as logsigmoid(z) and logsigmoid(-z) for the log-space mixture.

    Args:
        context_dim, state_dim, input_dim: sizes of c_t, s_t and x_t.
    """

    def __init__(self, context_dim: int, state_dim: int, input_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(context_dim + state_dim + input_dim, 1)  # [w_c; w_s; w_x], b_ptr

    def forward(self, context: Tensor, state: Tensor, inputs: Tensor) -> Tensor:
        """context (..., Dc), state (..., Ds), inputs (..., Dx) -> logit z (...)."""
        return self.linear(torch.cat([context, state, inputs], dim=-1)).squeeze(-1)


def extended_log_probs(
    logits: Tensor, attention: Tensor, src_ext: Tensor, n_oov: int, p_gen_logit: Tensor
) -> Tensor:
    """log P(w) of the final distribution over the extended vocabulary (See et al. 2017, eq. 9),

        P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t

    in log space, so that log P(w) stays exact where one of the two terms underflows:

        log P(w) = logaddexp(logsigmoid(z) + log_softmax(logits)(w), logsigmoid(-z) + log copy(w))

    with z the p_gen logit and copy(w) the attention summed over the source positions of w (a
    `scatter_add`), clamped to the smallest normal float: an id of no mass, another example's
    source word, gets log(tiny) (about -87) instead of -inf.

    Args:
        logits: (B, [T,] V) unnormalised vocabulary scores (P_vocab = softmax(logits)).
        attention: (B, [T,] S) attention a^t over the source, rows summing to one (zero at
            padding).
        src_ext: (B, S) long, the extended-vocabulary id of every source position (padding may
            hold any id below V + n_oov: its attention is zero).
        n_oov: K, the number of extended ids past V.
        p_gen_logit: (B, [T]) logit z of p_gen.

    Returns:
        (B, [T,] V + n_oov) float32 log-probabilities; exp sums to one per row (up to the tiny
        clamp).
    """
    vocab = logits.size(-1)
    attention = attention.float()
    log_vocab = torch.log_softmax(logits.float(), dim=-1)  # (B, [T,] V)
    z = p_gen_logit.float().unsqueeze(-1)  # (B, [T,] 1)
    generate = F.logsigmoid(z) + log_vocab  # log(p_gen P_vocab(w))
    # (B, S) -> (B, [1,] S) -> the attention's shape: the same ids for every target position
    index = src_ext.view(src_ext.size(0), *([1] * (attention.dim() - 2)), src_ext.size(1))
    index = index.expand_as(attention)
    mass = attention.new_zeros(*attention.shape[:-1], vocab + n_oov)  # (B, [T,] V + K)
    mass.scatter_add_(-1, index, attention)  # sum_{i: w_i = w} a_i
    copy = F.logsigmoid(-z) + torch.log(mass.clamp_min(torch.finfo(mass.dtype).tiny))
    in_vocab = torch.logaddexp(generate, copy[..., :vocab])  # (B, [T,] V)
    return torch.cat([in_vocab, copy[..., vocab:]], dim=-1)  # extended ids: copy term only


def coverage_loss(attention: Tensor, coverage: Tensor) -> Tensor:
    """covloss_t = sum_i min(a_i^t, c_i^t) (See et al. 2017, eq. 12).

    Args:
        attention: (B, [T,] S) attention of the step(s).
        coverage: same shape, c^t = the attention summed over the earlier steps.

    Returns:
        (B, [T]) the loss of every step (padding columns are zero in both, so add nothing).
    """
    return torch.minimum(attention, coverage).sum(dim=-1)


def teacher_forced_coverage(attention: Tensor) -> Tensor:
    """c^t = sum_{t' < t} a^{t'} for all T positions at once (eq. 10): (B, T, S) -> (B, T, S).

    An exclusive cumulative sum, c^0 = 0, c^1 = a^0, ..., shifted rather than `cumsum - a` so
    that it adds in the same order as a decoder accumulating step by step.
    """
    summed = torch.cumsum(attention, dim=1)  # (B, T, S): sum over t' <= t
    return torch.cat([torch.zeros_like(summed[:, :1]), summed[:, :-1]], dim=1)


class PointerParts(NamedTuple):
    """A family's teacher-forced pass, before the copy mixture.

    output: the output with logits (B, T, V), the family's attention when asked for and, with
        coverage, its `coverage_loss` (B, T).
    attention: a^t (B, T, S), the attention the copy distribution follows.
    p_gen_logit: z (B, T) of p_gen = sigmoid(z); None without copy.
    """

    output: Seq2SeqOutput
    attention: Tensor
    p_gen_logit: Tensor | None


class PointerGenerator(Seq2Seq):
    """A family's model with a copy distribution and/or coverage. It goes first among the bases
    of a family's pointer model: it takes the copy inputs (`CopyInputs`), keeps them in the
    decoder state, maps extended ids back into the vocabulary (`_in_vocabulary`) and mixes the
    copy distribution into the family's teacher-forced pass (`pointer_forward`).

    Args:
        vocab: as for the family's model; its unk_id is fed back in place of an extended id.
        copy: mix the copy distribution into the output (pointer-generator).
        coverage: the coverage loss (and, for RNNs, the coverage vector in the scores).
        **options: every keyword argument of the family's model.
    """

    def __init__(self, vocab: Vocabularies, *, copy: bool, coverage: bool, **options: Any) -> None:
        super().__init__(vocab, **options)  # the family's model, next in the method order
        self.unk_id = vocab.unk_id
        self.tgt_vocab_size = vocab.tgt_size
        self.copy = copy
        self.coverage = coverage

    def _in_vocabulary(self, tokens: Tensor) -> Tensor:
        """Extended ids (>= V) -> <unk>: they have no embedding, so a decoder fed a copied source
        word reads <unk>, as See et al.'s does."""
        return tokens.masked_fill(tokens >= self.tgt_vocab_size, self.unk_id)

    def _copy_source(self, copy_inputs: CopyInputs) -> tuple[Tensor | None, int]:
        """(src_ext (B, S) or None, n_oov) of the keyword arguments; a copy model needs src_ext."""
        src_ext = copy_inputs.get("src_ext")
        if self.copy and src_ext is None:
            raise ValueError(
                "a copy model needs src_ext, the source in the extended vocabulary "
                "(attnseq/data/extended_vocab.py)"
            )
        return src_ext, copy_inputs.get("n_oov", 0)

    def teacher_forced(self, inputs: TeacherForcing) -> Seq2SeqOutput:
        """The teacher-forced pass (`Seq2Seq.forward`); tgt_in may hold extended ids. Guided
        alignment (`alignment`) is not supported: ValueError.

        Returns:
            logits (B, T, V) or, with copy, log P (B, T, V + n_oov) with its `support`; the
            family's attention when asked for; `p_gen` (B, T) with copy, `coverage_loss`
            (B, T) with coverage.
        """
        if inputs.alignment is not None:
            raise ValueError("guided alignment is not supported for copy or coverage models")
        src_ext, n_oov = self._copy_source(inputs.copy)
        parts = self.pointer_forward(replace(inputs, tgt_in=self._in_vocabulary(inputs.tgt_in)))
        output = parts.output
        if self.copy:
            assert src_ext is not None and parts.p_gen_logit is not None
            z = parts.p_gen_logit  # (B, T)
            output.logits = extended_log_probs(output.logits, parts.attention, src_ext, n_oov, z)
            output.p_gen = torch.sigmoid(z)
            output.support = self._support(src_ext, inputs.src_lengths, output.logits.size(-1))
        return output

    def _support(self, src_ext: Tensor, src_lengths: Tensor, size: int) -> Tensor:
        """(B, V + K) bool: the ids an example's output can take, the vocabulary but PAD and
        BOS (decoding never emits them) and the extended ids of its own source words (the
        other examples' are log(tiny) slots)."""
        real = padding_mask(src_lengths, src_ext.size(1)).to(src_ext.device)  # (B, S)
        ids = src_ext.masked_fill(~real, self.pad_id)  # (B, S)
        support = torch.zeros(src_ext.size(0), size, dtype=torch.bool, device=src_ext.device)
        support.scatter_(1, ids, True)
        support[:, : self.tgt_vocab_size] = True
        support[:, [self.pad_id, self.bos_id]] = False
        return support

    @abc.abstractmethod
    def pointer_forward(self, inputs: TeacherForcing) -> PointerParts:
        """The teacher-forced pass of `teacher_forced`, tgt_in (B, T) in the target vocabulary."""

    def start_decoding(
        self, src: Tensor, src_lengths: Tensor, **copy_inputs: Unpack[CopyInputs]
    ) -> DecoderState:
        """The family's state, with "src_ext" and "n_oov" for copy."""
        src_ext, n_oov = self._copy_source(copy_inputs)
        state = super().start_decoding(src, src_lengths)
        if self.copy:
            state["src_ext"] = src_ext  # (B, S)
            state["n_oov"] = n_oov
        return state


class PointerGeneratorRNN(PointerGenerator, RNNSeq2Seq):
    """`RNNSeq2Seq` with a copy distribution and/or coverage. Copy: p_gen at every step from
    the context c_t, the top decoder state s_t after the step's RNN update and the embedded
    input x_t. Coverage (See et al. 2017, eq. 11): the state carries c^t (B, S), which enters
    the additive score, e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t).

    Args:
        vocab: as for `RNNSeq2Seq`.
        **options: copy and coverage (`PointerGenerator`; coverage needs an additive or concat
            global score) and every keyword argument of `RNNSeq2Seq` (attention, style, sizes).

    Raises:
        ValueError: copy or coverage without attention, or coverage with another score.
    """

    def __init__(self, vocab: Vocabularies, **options: Any) -> None:
        super().__init__(vocab, **options)
        self._refuse_without_annotation_attention("copy and coverage")
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
    def pointer_forward(self, inputs: TeacherForcing) -> PointerParts:
        """Teacher-forced pass, one decoder step at a time (coverage needs the previous steps);
        attention (B, T, S) if asked for."""
        losses: list[Tensor] = []
        tops: list[Tensor] = []

        # within the loop, between the steps: the order autograd sums s_t's gradients in (and
        # so the bits of the update) follows the order these are taken in
        def per_step(
            before: dict[str, Tensor], weights: Tensor | None, after: dict[str, Tensor]
        ) -> None:
            assert weights is not None
            if self.coverage:
                losses.append(coverage_loss(weights, before["coverage"]))  # (B,)
            tops.append(after["hidden"][:, -1])  # s_t: (B, H)

        state = self._encode(inputs.src, inputs.src_lengths)
        decoded = self._step_by_step(inputs.tgt_in, state, per_step)
        weights = decoded.weights  # (B, T, S)
        assert weights is not None
        output = self._output(decoded, inputs)  # logits (B, T, V)
        if self.coverage:
            output.coverage_loss = torch.stack(losses, dim=1)  # (B, T)
        z = None
        if self.copy:
            embedded = self.dropout(self.embedding(inputs.tgt_in))  # x_t: (B, T, emb)
            top = torch.stack(tops, dim=1)  # (B, T, H)
            z = self._p_gen_logit(weights, state["annotations"], top, embedded)
        return PointerParts(output, weights, z)

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """One step; prev_tokens may hold extended ids. With copy, the first
        result is log P (B, V + n_oov) instead of logits (B, V)."""
        prev_tokens = self._in_vocabulary(prev_tokens)
        pre_output, weights, new_state = self._step(prev_tokens, state)
        assert weights is not None
        # the same dropout as forward: a no-op when decoding (eval mode), and in training mode
        # a step-by-step pass computes what forward computes (benchmarks/check_loss_curve.py)
        logits = self.output(self.dropout(pre_output))  # (B, V)
        if self.copy:
            top = new_state["hidden"][:, -1]  # s_t: (B, H)
            inputs = self.dropout(self.embedding(prev_tokens))  # x_t, as in forward: (B, emb)
            z = self._p_gen_logit(weights, state["annotations"], top, inputs)
            logits = extended_log_probs(logits, weights, state["src_ext"], state["n_oov"], z)
        return logits, weights if need_weights else None, new_state


class PointerGeneratorTransformer(PointerGenerator, TransformerSeq2Seq):
    """`TransformerSeq2Seq` with a copy distribution and/or a coverage loss. The copy
    distribution is the head average of one layer's cross-attention (`_copy_attention`); p_gen
    reads c_t = sum_i a_i^t m_i over the memory m, the decoder's final output s_t and the
    embedded input x_t. Coverage is a loss only: dot-product heads have no tanh layer to add
    w_c c_i to.

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
        """a^t = sum_h xi_h a^{t,h} / sum_h xi_h, the copy layer's cross-attention averaged over
        its kept heads (head mask xi, models/head_mask.py), (B, H, T, S) -> (B, T, S)."""
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

    def pointer_forward(self, inputs: TeacherForcing) -> PointerParts:
        output, decoder, memory = self.decoder_pass(inputs, weights_of=self.copy_layer)
        copy_attention = self._copy_attention(decoder)  # (B, T, S)
        if self.coverage:
            coverage = teacher_forced_coverage(copy_attention)  # c^t: (B, T, S)
            output.coverage_loss = coverage_loss(copy_attention, coverage)  # (B, T)
        z = self._p_gen_logit(copy_attention, memory, decoder) if self.copy else None
        return PointerParts(output, copy_attention, z)

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """`TransformerSeq2Seq.decode_step`; prev_tokens may hold extended ids.
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
