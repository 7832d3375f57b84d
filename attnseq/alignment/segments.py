"""The segment level of hierarchical attention (attnseq/models/rnn_hierarchical.py) for saved
attention, segment views and the training log's heatmaps: the segment attention of a decoded
output, replayed with teacher forcing, and the segments' labels.

Shapes: T output rows, S source tokens, N segments.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from attnseq.data.extended_vocab import ExtendedExample

LABEL_CHARS = 16  # characters of a segment's text in its label (rotated tick labels)


def is_hierarchical(model: Any) -> bool:
    """Whether the model has a segment level (returns segment attention)."""
    return hasattr(model, "segment_attention_map")


def join_pieces(pieces: Sequence[str], kind: str) -> str:
    """Text of a tokenizer kind's pieces, without the tokenizer: sentencepiece reads "▁" as a
    space, word pieces are joined by spaces, char pieces are concatenated."""
    if kind == "word":
        return " ".join(pieces)
    return "".join(pieces).replace("\u2581", " ").strip()


def segment_labels(
    src_pieces: Sequence[str], segments: Sequence[int], join: Callable[[list[str]], str]
) -> list[str]:
    """One label per segment, "k: its first characters ..." (k 1-based), from the source
    pieces (S,), their segment ids (S,) and a way to join pieces into text."""
    count = max(segments, default=-1) + 1
    labels = []
    for segment in range(count):
        pieces = [piece for piece, s in zip(src_pieces, segments, strict=True) if s == segment]
        text = join(pieces).strip()
        short = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1].rstrip() + "…"
        labels.append(f"{segment + 1}: {short}")
    return labels


def hypothesis_segment_maps(
    model: Any,
    sources: Sequence[list[int]],
    outputs: Sequence[tuple[list[int], int]],
    extended: Sequence[ExtendedExample] | None = None,
    batch_size: int = 32,
) -> list[tuple[list[int], np.ndarray]]:
    """Segment ids (S,) and segment attention (T, N) of each decoded output, replayed with
    teacher forcing: beta at step t depends only on the source and the tokens before t, so the
    replay gives the values the search computed.

    Args:
        model: a hierarchical model (`is_hierarchical`), in eval mode.
        sources: each example's source ids.
        outputs: each example's output ids and its number of attention rows T (the tokens,
            plus one when the output ended with EOS).
        extended: copy models: each example's extended-vocabulary view.
        batch_size: examples replayed together.
    """
    device = next(model.parameters()).device

    def padded(rows: list[list[int]], width: int) -> torch.Tensor:
        return torch.tensor(
            [row + [model.pad_id] * (width - len(row)) for row in rows], device=device
        )

    maps: list[tuple[list[int], np.ndarray]] = []
    for start in range(0, len(sources), batch_size):
        chunk = range(start, min(start + batch_size, len(sources)))
        src_width = max(1, max(len(sources[i]) for i in chunk))
        tgt_width = max(1, max(outputs[i][1] for i in chunk))
        src = padded([list(sources[i]) for i in chunk], src_width)  # (B, S)
        lengths = torch.tensor([len(sources[i]) for i in chunk], device=device)
        tgt_rows = [[model.bos_id, *outputs[i][0]][: max(outputs[i][1], 1)] for i in chunk]
        copy_inputs: dict[str, Any] = {}
        if extended is not None:
            copy_inputs = {
                "src_ext": padded([list(extended[i].src_ext) for i in chunk], src_width),
                "n_oov": max(len(extended[i].oovs) for i in chunk),
            }
        with torch.no_grad():
            beta, segments = model.segment_attention_map(
                src, lengths, padded(tgt_rows, tgt_width), **copy_inputs
            )
        for row, i in enumerate(chunk):
            ids = segments[row, : len(sources[i])].tolist()
            n_segments = max(ids, default=0) + 1
            rows = outputs[i][1]
            maps.append((ids, beta[row, :rows, :n_segments].float().cpu().numpy()))
    return maps
