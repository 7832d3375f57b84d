"""The RNN encoder-decoder with hierarchical attention (Nallapati, Zhou, dos Santos, Gulcehre &
Xiang 2016, "Abstractive Text Summarization using Sequence-to-sequence RNNs and Beyond", CoNLL,
section 2.4): model.attention.hierarchy=sentence. The source is cut into segments (speaker turns
or sentences, attnseq/data/segments.py), encoded in two levels (`HierarchicalEncoder`), and the
word attention is re-weighted by a segment attention (`HierarchicalRNNSeq2Seq._attend`).

Shapes: B batch, S source length, T target length, N segments, L longest segment, E encoder
output size.
"""

from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnseq.attention import build_attention
from attnseq.attention.base import Attention
from attnseq.attention.hierarchical import combine_hierarchical
from attnseq.config.checks import encoder_output_size
from attnseq.config.schema import ModelConfig
from attnseq.data.segments import PADDING_SEGMENT, SourceSegmenter
from attnseq.models.pointer_generator import PointerGeneratorRNN
from attnseq.models.rnn import RNN_CLASSES, RNNEncoder, RNNSeq2Seq, recurrence
from attnseq.models.seq2seq import (
    SegmentAttention,
    Seq2Seq,
    Seq2SeqOutput,
    TeacherForcing,
    Vocabularies,
)


class HierarchicalEncoding(NamedTuple):
    """annotations (B, S, E) word annotations (zeros at padding); summary (B, E) of the whole
    source; segment_annotations (B, N, E); segment_mask (B, N) bool, True at real segments."""

    annotations: Tensor
    summary: Tensor
    segment_annotations: Tensor
    segment_mask: Tensor


class SegmentLayout(NamedTuple):
    """Where each source token goes among the B*N segment rows.

    counts: (B, N) long tokens per segment (0 for padding segments).
    flat: (B, S) long index into the (B*N*L) flattened segment rows (valid where real).
    real: (B, S) bool, True at real source tokens.
    width: L, the longest segment (at least 1).
    """

    counts: Tensor
    flat: Tensor
    real: Tensor
    width: int


def segment_layout(segments: Tensor) -> SegmentLayout:
    """The packing of a batch's segments (B, S) (contiguous, non-decreasing ids per row,
    `PADDING_SEGMENT` at padding) into B*N rows of L tokens."""
    batch, length = segments.shape
    real = segments != PADDING_SEGMENT  # (B, S)
    segment = segments.clamp_min(0)  # (B, S)
    n_segments = int(segment.max()) + 1 if segments.numel() else 1
    counts = segments.new_zeros(batch, n_segments).scatter_add(1, segment, real.long())  # (B, N)
    starts = counts.cumsum(dim=1) - counts  # (B, N) first position of each segment
    positions = torch.arange(length, device=segments.device).expand(batch, -1)  # (B, S)
    offset = positions - starts.gather(1, segment)  # (B, S) position within its segment
    width = max(1, int(counts.max()) if counts.numel() else 1)
    rows = torch.arange(batch, device=segments.device).unsqueeze(1) * n_segments + segment
    return SegmentLayout(counts, rows * width + offset, real, width)


class HierarchicalEncoder(nn.Module):
    """The two-level encoder (Nallapati et al. 2016, section 2.4; Yang et al. 2016, section
    2.2): the word encoder runs over every segment on its own (a word's annotation reads its
    segment only), and this segment RNN over the segment vectors (each the word encoder's final
    states of the segment) gives the segment annotations g_s and the summary the decoder's
    initial state is bridged from. A batch's segments run as B*N rows of at most L tokens in
    one packed RNN call, scattered back to the source positions.

    Args:
        size: E, the word encoder's output size (the segment vectors' and annotations' size).
        layers, bidirectional, cell: as the word encoder; the segment RNN has E / directions
            units per direction, so segment annotations are E wide too.
    """

    def __init__(self, size: int, *, layers: int, bidirectional: bool, cell: str) -> None:
        super().__init__()
        directions = 2 if bidirectional else 1
        self.rnn = RNN_CLASSES[cell](
            size,
            size // directions,
            num_layers=layers,
            batch_first=True,
            bidirectional=bidirectional,
        )

    def forward(
        self, word_encoder: RNNEncoder, src: Tensor, segments: Tensor
    ) -> HierarchicalEncoding:
        """Encode src (B, S) with segments (B, S) (`segment_layout`) in two levels."""
        layout = segment_layout(segments)
        batch, n_segments = layout.counts.shape
        rows = batch * n_segments
        pad_id = word_encoder.embedding.padding_idx
        tokens = src.new_full((rows * layout.width,), pad_id if pad_id is not None else 0)
        tokens[layout.flat[layout.real]] = src[layout.real]
        lengths = layout.counts.view(-1).clamp_min(1)  # a padding segment reads one pad token
        word_annotations, segment_vectors = word_encoder(tokens.view(rows, layout.width), lengths)
        annotations = word_annotations.new_zeros(*src.shape, word_annotations.size(-1))
        flat_annotations = word_annotations.reshape(rows * layout.width, -1)  # (B*N*L, E)
        annotations[layout.real] = flat_annotations[layout.flat[layout.real]]  # (B, S, E)
        segment_mask = layout.counts > 0  # (B, N)
        vectors = segment_vectors.view(batch, n_segments, -1) * segment_mask.unsqueeze(-1)
        segment_annotations, summary = self._segment_level(vectors, segment_mask.sum(dim=1))
        return HierarchicalEncoding(annotations, summary, segment_annotations, segment_mask)

    def _segment_level(self, vectors: Tensor, n_segments: Tensor) -> tuple[Tensor, Tensor]:
        """Segment annotations (B, N, E) (zeros past each source's segments) and the summary
        (B, E): the top layer's final states, directions concatenated."""
        packed = pack_padded_sequence(
            vectors, n_segments.clamp_min(1).cpu(), batch_first=True, enforce_sorted=False
        )
        outputs, final = recurrence(self.rnn, packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=vectors.size(1))
        final_hidden = final[0] if isinstance(final, tuple) else final  # LSTM: (h, c)
        directions = 2 if self.rnn.bidirectional else 1
        top = final_hidden[-directions:]  # (dirs, B, E / dirs)
        return outputs, top.transpose(0, 1).reshape(vectors.size(0), -1)


# the key of a per-step scratch dict through which `_attend` hands beta to `_step`
_TRACE = "segment_trace"


class HierarchicalRNNSeq2Seq(RNNSeq2Seq):
    """`RNNSeq2Seq` with hierarchical attention; with `PointerGeneratorRNN` after it among the
    bases, the hierarchical pointer-generator (`HierarchicalPointerRNN`). The decoder state
    adds "segments" (B, S), "segment_annotations" (B, N, E), "segment_mask" (B, N),
    "segment_keys" and "segment_weights" (B, N), beta of the last step.

    Args:
        vocab: as for `RNNSeq2Seq`.
        segment_attention: the score of beta over the segment annotations (its key size is
            the encoder's output size, its query the decoder state, as the word attention).
        segmenter: token ids -> segment ids for the source vocabulary; needed to encode
            (`models.loading.model_for` gives it from the checkpoint's source tokenizer).
        **options: every keyword argument of the next base (attention, sizes, copy, ...).

    Raises:
        ValueError: without word attention (model.attention.score=none).
    """

    def __init__(
        self,
        vocab: Vocabularies,
        *,
        segment_attention: Attention,
        segmenter: SourceSegmenter | None = None,
        **options: Any,
    ) -> None:
        super().__init__(vocab, **options)
        self._refuse_without_annotation_attention("hierarchical attention")
        self.segmenter = segmenter
        self.segment_encoder = HierarchicalEncoder(
            self.encoder.output_size,
            layers=self.layers,
            bidirectional=self.encoder.rnn.bidirectional,
            cell=self.cell,
        )
        self.segment_attention = segment_attention

    def source_segments(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        """(B, S) segment ids of src (B, S), -1 at padding."""
        if self.segmenter is None:
            raise ValueError(
                "a hierarchical model needs the source segmenter of its tokenizer "
                "(attnseq.data.segments.SourceSegmenter.from_tokenizer)"
            )
        return self.segmenter.batch_segment_ids(src, src_lengths)

    def _encoder_outputs(
        self, src: Tensor, src_lengths: Tensor
    ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        segments = self.source_segments(src, src_lengths)  # (B, S)
        encoding = self.segment_encoder(self.encoder, src, segments)
        segment_annotations = encoding.segment_annotations  # (B, N, E)
        extra_state = {
            "segments": segments,
            "segment_annotations": segment_annotations,
            "segment_mask": encoding.segment_mask,  # (B, N)
            "segment_keys": self.segment_attention.prepare_keys(segment_annotations),
            "segment_weights": segment_annotations.new_zeros(segment_annotations.shape[:2]),
        }
        return encoding.annotations, encoding.summary, extra_state

    def _attend(
        self, query: Tensor, state: dict[str, Tensor], positions: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """Context (B, T, E) and P (B, T, S) for queries (B, T, H): the word attention alpha
        over the words and the segment attention beta over the segment annotations, from the
        same query, combine into (attention/hierarchical.py)

            P(j) = alpha_j beta_{s(j)} / sum_k alpha_k beta_{s(k)}

        the step's attention: its context c = sum_j P(j) h_j, its map, the copy distribution
        and what coverage sums."""
        _, word_weights = super()._attend(query, state, positions)  # alpha: (B, T, S)
        assert word_weights is not None
        segment_annotations = state["segment_annotations"]
        _, segment_weights = self.segment_attention(  # beta: (B, T, N)
            query,
            segment_annotations,
            segment_annotations,
            state["segment_mask"],
            prepared_keys=state["segment_keys"],
        )
        weights = combine_hierarchical(word_weights, segment_weights, state["segments"])
        trace: Any = state.get(_TRACE)
        if trace is not None:
            trace["segment_weights"] = segment_weights
        return torch.bmm(weights, state["annotations"]), weights  # c = sum_j P(j) h_j

    def _step(
        self, prev_tokens: Tensor, state: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        trace: dict[str, Tensor] = {}
        with_trace: Any = {**state, _TRACE: trace}  # read by `_attend` of this step only
        pre_output, weights, new_state = super()._step(prev_tokens, with_trace)
        del new_state[_TRACE]
        new_state["segment_weights"] = trace["segment_weights"].squeeze(1)  # beta: (B, N)
        return pre_output, weights, new_state

    def teacher_forced(self, inputs: TeacherForcing) -> Seq2SeqOutput:
        """The base model's pass; with need_weights, also the `segment_attention`
        (`segment_attention_map`)."""
        output = super().teacher_forced(inputs)
        if inputs.need_weights:
            weights, segments = self.segment_attention_map(
                inputs.src, inputs.src_lengths, inputs.tgt_in, **inputs.copy
            )
            output.segment_attention = SegmentAttention(weights, segments)
        return output

    @torch.no_grad()
    def segment_attention_map(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, **copy_inputs: Any
    ) -> tuple[Tensor, Tensor]:
        """beta of every teacher-forced step (B, T, N), and the segments (B, S): the cached
        decoder run over tgt_in (B, T), which computes what forward computes."""
        state = self.start_decoding(src, src_lengths, **copy_inputs)
        steps = []
        for t in range(tgt_in.size(1)):
            _, _, state = self.decode_step(tgt_in[:, t], state)
            steps.append(state["segment_weights"])
        return torch.stack(steps, dim=1), state["segments"]


class HierarchicalPointerRNN(HierarchicalRNNSeq2Seq, PointerGeneratorRNN):
    """The pointer-generator (copy and/or coverage) with hierarchical attention: P is the copy
    distribution, coverage sums P and enters alpha's score."""


def build_hierarchical_rnn(
    cfg: ModelConfig,
    vocab: Vocabularies,
    options: dict[str, Any],
    segmenter: SourceSegmenter | None,
) -> Seq2Seq:
    """The hierarchical model of `cfg` (the pointer-generator one with copy or coverage);
    `options` are the keyword arguments of `RNNSeq2Seq` (models/__init__.py), word attention
    included. The segment score is the word score's kind, built after the base model."""
    segment_attention = build_attention(
        cfg.attention.score.value,
        cfg.hidden,
        encoder_output_size(cfg),
        attn_dim=cfg.attention.attn_dim or cfg.hidden,
    )
    options.update(segment_attention=segment_attention, segmenter=segmenter)
    if not (cfg.copy or cfg.coverage):
        return HierarchicalRNNSeq2Seq(vocab, **options)
    return HierarchicalPointerRNN(vocab, copy=cfg.copy, coverage=cfg.coverage, **options)
