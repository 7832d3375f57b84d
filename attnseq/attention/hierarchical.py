"""Hierarchical attention: a segment attention beta re-weights the word attention alpha
(Nallapati, Zhou, dos Santos, Gulcehre & Xiang 2016, "Abstractive Text Summarization using
Sequence-to-sequence RNNs and Beyond", CoNLL, section 2.4), s(j) the segment of word j:

    P(j) = alpha_j * beta_{s(j)} / sum_k alpha_k * beta_{s(k)}

Shapes: B batch, T decoder steps, S source length, N segments.
"""

import torch
from torch import Tensor

from attnseq.data.segments import PADDING_SEGMENT


def segment_weights_per_word(segment_weights: Tensor, segments: Tensor) -> Tensor:
    """beta_{s(j)} for every source position: (B, T, N) and segments (B, S) -> (B, T, S); 0 at
    padding (segment `PADDING_SEGMENT`)."""
    index = segments.clamp_min(0).unsqueeze(1).expand(-1, segment_weights.size(1), -1)
    per_word = segment_weights.gather(2, index)  # (B, T, S)
    return per_word.masked_fill((segments == PADDING_SEGMENT).unsqueeze(1), 0.0)


def combine_hierarchical(word_weights: Tensor, segment_weights: Tensor, segments: Tensor) -> Tensor:
    """P(j) = alpha_j beta_{s(j)} / sum_k alpha_k beta_{s(k)} (Nallapati et al. 2016, 2.4).

    Args:
        word_weights: alpha (B, T, S), each row a distribution over the source.
        segment_weights: beta (B, T, N), each row a distribution over the segments.
        segments: (B, S) long segment of every source position, `PADDING_SEGMENT` at padding.

    Returns:
        (B, T, S) rows summing to one (a row whose every product is 0, e.g. an empty source,
        stays all zeros rather than NaN).
    """
    scaled = word_weights * segment_weights_per_word(segment_weights, segments)  # (B, T, S)
    total = scaled.sum(dim=-1, keepdim=True)  # (B, T, 1)
    return scaled / total.clamp_min(torch.finfo(scaled.dtype).tiny)
