"""What the pointer-generator models of both families share (See, Liu & Manning 2017, "Get To The
Point: Summarization with Pointer-Generator Networks", ACL; the formulas are in copy.py).

`PointerGenerator` goes first among the bases of a family's pointer model (rnn_pointer.py,
transformer_pointer.py), before the family's model class. It holds the copy and coverage
switches, takes the copy inputs (`CopyInputs`: the source in the extended vocabulary) in
`forward` and `start_decoding`, keeps them in the decoder state, reads extended ids (>= V,
copied source words) back as <unk> when they come in as decoder inputs, as See et al. do (they
have no embedding), and mixes the copy distribution into the teacher-forced output. The family
class implements `pointer_forward`: the teacher-forced pass over decoder inputs in the target
vocabulary, with the attention a^t and the p_gen logit z the mixture needs.

Decoder state: the family's, plus "src_ext" (B, S) and "n_oov" (an int, passed through by
`reorder_state`) with copy.

Shapes: B batch, S source length, T target length, V target vocabulary.
"""

import abc
from typing import Any, NamedTuple, Unpack

import torch
from torch import Tensor

from attnseq.models.copy import extended_log_probs
from attnseq.models.seq2seq import (
    AlignmentHead,
    CopyInputs,
    DecoderState,
    Seq2Seq,
    Seq2SeqOutput,
    Vocabularies,
)


class PointerParts(NamedTuple):
    """A family's teacher-forced pass, before the copy mixture.

    output: the output with logits (B, T, V), the family's attention when asked for and its
        extras ("coverage_loss" (B, T) with coverage).
    attention: a^t (B, T, S), the attention the copy distribution follows.
    p_gen_logit: z (B, T) of p_gen = sigmoid(z); None without copy.
    """

    output: Seq2SeqOutput
    attention: Tensor
    p_gen_logit: Tensor | None


class PointerGenerator(Seq2Seq):
    """A family's model with a copy distribution and/or coverage (module docstring).

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
        """Extended ids (>= V) -> <unk>: what the decoder reads when it copied a source word."""
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

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        alignment: AlignmentHead | None = None,
        **copy_inputs: Unpack[CopyInputs],
    ) -> Seq2SeqOutput:
        """Teacher-forced pass (`Seq2Seq.forward`); tgt_in may hold extended ids. Guided
        alignment (`alignment`) is not supported: ValueError.

        Returns:
            logits (B, T, V) or, with copy, log P (B, T, V + n_oov); the family's attention
            when asked for; extras "p_gen" (B, T) with copy, "coverage_loss" (B, T) with
            coverage, besides the family's own.
        """
        if alignment is not None:
            raise ValueError("guided alignment is not supported for copy or coverage models")
        src_ext, n_oov = self._copy_source(copy_inputs)
        parts = self.pointer_forward(src, src_lengths, self._in_vocabulary(tgt_in), need_weights)
        output = parts.output
        if self.copy:
            assert src_ext is not None and parts.p_gen_logit is not None
            z = parts.p_gen_logit  # (B, T)
            output.logits = extended_log_probs(output.logits, parts.attention, src_ext, n_oov, z)
            output.extras["p_gen"] = torch.sigmoid(z)
        return output

    @abc.abstractmethod
    def pointer_forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, need_weights: bool
    ) -> PointerParts:
        """The teacher-forced pass of `forward`, tgt_in (B, T) in the target vocabulary."""

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
