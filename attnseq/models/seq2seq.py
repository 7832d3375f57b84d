"""The interface every attnseq model implements, so that training, decoding, evaluation and
visualization never need to know which family they are talking to.

Token tensors are padded with `pad_id`; `tgt_in` starts with BOS, `tgt_out` ends with EOS.
Shapes: B batch, S source length, T target length, V target vocabulary, L layers, H heads.

Cross-attention weights always come back as (B, T, S) for RNNs and (B, L, H, T, S) for
transformers: `(batch, [layers, heads,] tgt_len, src_len)`, the one convention of every model.

Incremental decoding state is a (possibly nested) dict/list/tuple of tensors whose first
dimension is the batch (or batch x beam); `reorder_state` selects rows of every tensor in it,
which is all beam search needs.

Copy models (pointer-generators: models/pointer_generator.py) also take the keyword arguments
`CopyInputs` (`src_ext` (B, S) and `n_oov`, the source in their extended vocabulary of V + n_oov
ids) in `forward` and `start_decoding`, and return log-probabilities over that vocabulary in place
of logits; `extras` then holds "p_gen" (B, T) and, with coverage, "coverage_loss" (B, T).

Guided alignment (Garg et al. 2019) supervises one cross-attention map: `forward` with
`alignment=AlignmentHead(layer, head)` also returns it in `extras["alignment_attention"]`
(B, T, S). Only that one layer of a transformer takes the explicit attention path, and without
`alignment` nothing changes.
"""

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from torch import Tensor, nn

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
        """ValueError unless one embedding matrix can serve source and target (equal sizes)."""
        if self.src_size != self.tgt_size:
            raise ValueError(
                "share_src_tgt_embeddings needs equal vocabulary sizes, got "
                f"src_vocab_size={self.src_size} and tgt_vocab_size={self.tgt_size}"
            )


ALIGNMENT_ATTENTION = "alignment_attention"  # the extras key of the supervised attention


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
        weights (B, H, T, S) in extras["alignment_attention"] as (B, T, S)."""
        chosen = weights.mean(dim=1) if self.head is None else weights[:, self.head]
        output.extras[ALIGNMENT_ATTENTION] = chosen
        return output


class CopyInputs(TypedDict, total=False):
    """The keyword arguments a copy model takes besides the source: src_ext (B, S) long, the
    source in the extended vocabulary, and n_oov, the number of extended ids past V. Plain
    models take none; decoding passes them through to the model."""

    src_ext: Tensor | None
    n_oov: int


@dataclass
class Seq2SeqOutput:
    """What a teacher-forced forward pass returns.

    logits: (B, T, V) unnormalised scores of the next target token.
    attention: cross-attention weights, (B, T, S) or (B, L, H, T, S); None unless asked for
        (or when the model has no attention).
    extras: anything family-specific (e.g. "self_attention", "encoder_attention").
    """

    logits: Tensor
    attention: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)


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

    @abc.abstractmethod
    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        alignment: AlignmentHead | None = None,
    ) -> Seq2SeqOutput:
        """Teacher-forced pass.

        Args:
            src: (B, S) source token ids, right-padded with pad_id.
            src_lengths: (B,) number of real source tokens (on the same device as src).
            tgt_in: (B, T) BOS + target ids, right-padded.
            need_weights: return cross-attention weights (the transformer then takes its
                explicit attention path instead of the fused kernel).
            alignment: also return that attention in extras["alignment_attention"] (B, T, S)
                (guided alignment training).
        """

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
