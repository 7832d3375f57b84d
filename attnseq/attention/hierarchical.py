"""Hierarchical attention: a segment-level attention re-weights the word-level attention
(Nallapati, Zhou, dos Santos, Gulcehre & Xiang 2016, "Abstractive Text Summarization using
Sequence-to-sequence RNNs and Beyond", CoNLL, section 2.4).

At every decoder step, a word attention alpha over all source words and a segment attention
beta over the segments (sentences or speaker turns) are combined: each word weight is scaled by
the weight of its segment s(j) and the result renormalised over the source (section 2.4):

    P(j) = alpha_j * beta_{s(j)} / sum_k alpha_k * beta_{s(k)}

The context vector is c = sum_j P(j) h_j, and P is the attention map, the copy distribution of a
pointer-generator and what coverage accumulates. A segment with beta = 0 gets no weight at all;
P factors into the segment mass and the word distribution within the segment,
P(j) = P(s(j)) * alpha_j / sum_{k in s(j)} alpha_k with P(s) = beta_s A_s / sum_r beta_r A_r and
A_s = sum_{k in s} alpha_k.

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
