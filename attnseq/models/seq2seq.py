"""The interface every attnseq model implements (`Seq2Seq`) and what its teacher-forced pass
returns (`Seq2SeqOutput`); docs/internals/models.md explains the contract.

Shapes: B batch, S source length, T target length, V target vocabulary (V + K extended ids
with copy), L layers, H heads, N source segments.
"""

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from torch import Tensor, nn

from attnseq.errors import UserError

DecoderState = Any  # nested dict/list/tuple of tensors, batch-first


@dataclass(frozen=True)
class Vocabularies:
    """The token ids a model reads and writes; special ids are shared by source and target.

    src_size, tgt_size: vocabulary sizes (V is tgt_size).
    pad_id, bos_id, eos_id: padding, begin and end of sequence.
    unk_id: <unk>, what a copy model feeds back after emitting a copied source word (1 for
        every attnseq tokenizer).
    joint: source and target come from one tokenizer (e.g. a joint sentencepiece model), so
        their embeddings can be one matrix.
    """

    src_size: int
    tgt_size: int
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int = 1
    joint: bool = False

    def check_shareable(self) -> None:
        """UserError unless one embedding matrix can serve source and target (equal sizes):
        the vocabularies come from the data, so only now can the setting be refused."""
        if self.src_size != self.tgt_size:
            raise UserError(
                "model.share_src_tgt_embeddings=true needs equal vocabulary sizes, got "
                f"src_vocab_size={self.src_size} and tgt_vocab_size={self.tgt_size}: give both "
                "sides one tokenizer (data.tokenizer=sentencepiece with data.spm_joint=true) "
                "or set it false"
            )


@dataclass(frozen=True)
class AlignmentHead:
    """The cross-attention that guided alignment supervises.

    layer: a transformer decoder layer, Python indexing (-1 = the last).
    head: one of its heads, or None for the mean of its heads. An RNN has one attention and
        ignores both.
    """

    layer: int = -1
    head: int | None = None

    def attach(self, output: "Seq2SeqOutput", weights: Tensor) -> "Seq2SeqOutput":
        """`output`, with the chosen head (or the head mean) of one layer's cross-attention
        weights (B, H, T, S) as its `alignment_attention` (B, T, S)."""
        output.alignment_attention = (
            weights.mean(dim=1) if self.head is None else weights[:, self.head]
        )
        return output


class CopyInputs(TypedDict, total=False):
    """The keyword arguments a copy model takes besides the source: src_ext (B, S) long, the
    source in the extended vocabulary, and n_oov, the number of extended ids past V. Other
    models ignore them; decoding passes them through to the model."""

    src_ext: Tensor | None
    n_oov: int


@dataclass(frozen=True)
class TeacherForcing:
    """The arguments of one teacher-forced pass (`Seq2Seq.forward`), handed on whole."""

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    need_weights: bool = False
    alignment: AlignmentHead | None = None
    copy: CopyInputs = field(default_factory=lambda: CopyInputs())


@dataclass(frozen=True)
class ReinforceSample:
    """The hard attention a training pass sampled (model.attention.hard=reinforce), for the
    REINFORCE term of the loss (models/objective.py).

    log_prob: (B, T) log p(s~_t | a_t) of every step's sample, summed over heads and layers.
    entropy: (B, T) H(a_t) of every step's attention, summed the same way.
    baseline: 0-dim, the model's moving-average baseline b (its buffer; NaN before the first
        reward), read by the loss and moved by the training step (`move_baseline`).
    """

    log_prob: Tensor
    entropy: Tensor
    baseline: Tensor


@dataclass(frozen=True)
class SegmentAttention:
    """The segment level of hierarchical attention (models/rnn_hierarchical.py).

    weights: (B, T, N) beta, the attention over the source segments at every step.
    segments: (B, S) long, the segment of every source position (-1 at padding).
    """

    weights: Tensor
    segments: Tensor


@dataclass
class Seq2SeqOutput:
    """What a teacher-forced pass returns. Every field but `logits` is None unless the model
    computes it and the pass asks for it.

    logits: (B, T, V) unnormalised next-token scores; a copy model's are log P over its
        extended vocabulary, (B, T, V + K).
    attention: cross-attention, (B, T, S) or (B, L, H, T, S); with need_weights.
    encoder_self_attention, decoder_self_attention: (B, L, H, S, S) and (B, L, H, T, T),
        transformers with need_weights whose self-attention kind forms weights.
    alignment_attention: (B, T, S), the attention guided alignment supervises (`alignment`).
    p_gen: (B, T) the generation probability (copy models).
    coverage_loss: (B, T) covloss_t of every step (coverage models).
    support: (B, V + K) bool, the ids each example's distribution ranges over (copy models:
        the vocabulary but PAD and BOS, and the example's own source words); None: every id.
    reinforce: the sampled hard attention (REINFORCE training).
    segment_attention: hierarchical models with need_weights.
    """

    logits: Tensor
    attention: Tensor | None = None
    encoder_self_attention: Tensor | None = None
    decoder_self_attention: Tensor | None = None
    alignment_attention: Tensor | None = None
    p_gen: Tensor | None = None
    coverage_loss: Tensor | None = None
    support: Tensor | None = None
    reinforce: ReinforceSample | None = None
    segment_attention: SegmentAttention | None = None


def map_state(state: DecoderState, fn: Callable[[Tensor], Tensor]) -> DecoderState:
    """Apply `fn` to every tensor in a nested decoder state; other leaves pass through."""
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, dict):
        return {key: map_state(value, fn) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(map_state(value, fn) for value in state)
    return state


class Seq2Seq(nn.Module, metaclass=abc.ABCMeta):
    """Encoder-decoder with attention. Subclasses: models/rnn.py, models/transformer.py."""

    def __init__(self, pad_id: int, bos_id: int, eos_id: int) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.eos_id = eos_id

    @property
    def has_attention(self) -> bool:
        """Whether the model attends over the source (returns weights when asked): False for the
        fixed-vector baseline (model.attention.score=none), which has no alignment to score."""
        return True

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        alignment: AlignmentHead | None = None,
        **copy_inputs: Unpack[CopyInputs],
    ) -> Seq2SeqOutput:
        """Teacher-forced pass: `teacher_forced` of these arguments.

        Args:
            src: (B, S) source token ids, right-padded with pad_id.
            src_lengths: (B,) number of real source tokens (on the same device as src).
            tgt_in: (B, T) BOS + target ids, right-padded.
            need_weights: return the attention weights (the transformer then takes its
                explicit attention path instead of the fused kernel).
            alignment: also return that attention as `alignment_attention` (B, T, S)
                (guided alignment training).
            **copy_inputs: copy models: the source in their extended vocabulary.
        """
        inputs = TeacherForcing(src, src_lengths, tgt_in, need_weights, alignment, copy_inputs)
        return self.teacher_forced(inputs)

    def teacher_forced(self, inputs: TeacherForcing) -> Seq2SeqOutput:
        """The pass `forward` describes; each family implements it (a stub may override
        `forward` instead)."""
        raise NotImplementedError(f"{type(self).__name__} implements no teacher-forced pass")

    @abc.abstractmethod
    def start_decoding(self, src: Tensor, src_lengths: Tensor) -> DecoderState:
        """Encode the source once and return the state for `decode_step`."""

    @abc.abstractmethod
    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """One incremental decoding step.

        Args:
            prev_tokens: (B,) the previously emitted token (BOS at the first step).
            state: from `start_decoding` or the previous step.

        Returns:
            logits (B, V), cross-attention of this step (B, S) or (B, L, H, S) or None,
            and the new state.
        """

    def reorder_state(self, state: DecoderState, index: Tensor) -> DecoderState:
        """Select (and repeat) batch rows of the state: index (B',) of row numbers."""
        return map_state(state, lambda tensor: tensor.index_select(0, index))
