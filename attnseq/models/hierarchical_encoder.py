"""The two-level encoder of hierarchical attention (Nallapati et al. 2016, section 2.4; Yang et
al. 2016, "Hierarchical Attention Networks for Document Classification", section 2.2).

Word level: the model's `RNNEncoder` runs over every segment on its own (a segment is a speaker
turn or a sentence, attnseq/data/segments.py), so a word's annotation h_j reads only its own
segment. Segment level: a second (bi)directional RNN runs over the segment vectors (each the
word encoder's final states of the segment, both directions concatenated) and gives the segment
annotations g_s the segment attention scores. The decoder's initial state is bridged from the
segment RNN's final states, the summary of the whole source.

Layout: a batch's segments are packed as B*N rows of at most L tokens (N the most segments of
one source in the batch, L the longest segment), encoded in one packed RNN call, and scattered
back to the source positions.

Shapes: B batch, S source length, N segments, L longest segment, E encoder output size.
"""

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnseq.data.segments import PADDING_SEGMENT
from attnseq.models.rnn import RNN_CLASSES, RNNEncoder


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
    """The segment-level RNN over segment vectors, and the two-level pass (module docstring).

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
        outputs, final = self.rnn(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=vectors.size(1))
        final_hidden = final[0] if isinstance(final, tuple) else final  # LSTM: (h, c)
        directions = 2 if self.rnn.bidirectional else 1
        top = final_hidden[-directions:]  # (dirs, B, E / dirs)
        return outputs, top.transpose(0, 1).reshape(vectors.size(0), -1)
