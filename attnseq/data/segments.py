"""Source segments for hierarchical attention: the segment (speaker turn or sentence) of each
source token, found on the text its tokens spell (`segment_starts`, `SourceSegmenter`)."""

import bisect
import re
from collections.abc import Sequence

import torch
from torch import Tensor

from attnseq.data.tokenizers import CharTokenizer, Tokenizer, WordTokenizer

SPEAKER_TAG = re.compile(r"#[A-Za-z]+\d*#\s*:")
SENTENCE_BREAK = re.compile(r"[.!?]+[\"')\]]*\s+(?=[A-Z0-9\"'(\[#])")
ABBREVIATIONS = frozenset(
    (
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "jr",
        "sr",
        "vs",
        "etc",
        "no",
        "mt",
        "ft",
        "inc",
        "ltd",
        "co",
        "corp",
        "gen",
        "col",
        "lt",
        "sgt",
        "rev",
    )
)
PADDING_SEGMENT = -1  # the segment id of padding positions


def segment_starts(text: str) -> list[int]:
    """Character offsets where the segments of `text` start (the first is always 0).

    A text with speaker tags (`SPEAKER_TAG`: `#Person1#:`, any `#Name#:`) is cut before every
    tag: one segment per speaker turn (`#PhoneNumber#`, without a colon, does not cut).
    Otherwise a sentence ends after a run of `.`, `!` or `?` (and closing quotes or brackets)
    followed by whitespace and an upper-case letter, a digit, an opening quote or bracket
    (`SENTENCE_BREAK`), unless the word before the stop is in `ABBREVIATIONS` ("Mr. Smith").
    """
    tags = [match.start() for match in SPEAKER_TAG.finditer(text)]
    if tags:
        return [0] + [start for start in tags if start > 0]
    starts = [0]
    for match in SENTENCE_BREAK.finditer(text):
        word = re.search(r"(\w+)\W*$", text[: match.start() + 1])
        if word is not None and word.group(1).lower() in ABBREVIATIONS:
            continue
        starts.append(match.end())
    return starts


def split_segments(text: str) -> list[str]:
    """The segments of `text`, stripped: what `segment_starts` cuts it into."""
    starts = segment_starts(text)
    ends = starts[1:] + [len(text)]
    pieces = (text[start:end].strip() for start, end in zip(starts, ends, strict=True))
    return [piece for piece in pieces if piece]


def token_surfaces(tokenizer: Tokenizer) -> list[str]:
    """The text each id of `tokenizer` stands for in its source: a character, a space and the
    word, a sentencepiece piece with "▁" read as a space; nothing for special tokens."""
    pieces = tokenizer.ids_to_pieces(range(tokenizer.vocab_size))
    specials = {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id}
    if isinstance(tokenizer, CharTokenizer):
        surfaces = list(pieces)
    elif isinstance(tokenizer, WordTokenizer):
        surfaces = [" " + piece for piece in pieces]
    else:  # sentencepiece: "▁" marks a space
        surfaces = [piece.replace("\u2581", " ") for piece in pieces]
    return ["" if token_id in specials else text for token_id, text in enumerate(surfaces)]


class SourceSegmenter:
    """Token ids -> segment ids, for one source vocabulary: a token belongs to the segment of
    its first non-space character (a space-only token to the next token's), so the segments
    follow the text the model reads, truncation included.

    Args:
        surfaces: the text of every source id (`token_surfaces`).
        max_segments: the most segments of one source; later boundaries are ignored.
    """

    def __init__(self, surfaces: Sequence[str], max_segments: int) -> None:
        if max_segments < 1:
            raise ValueError(f"max_segments must be >= 1, got {max_segments}")
        self.surfaces = list(surfaces)
        self.max_segments = max_segments

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer, max_segments: int) -> "SourceSegmenter":
        return cls(token_surfaces(tokenizer), max_segments)

    def segment_ids(self, ids: Sequence[int]) -> list[int]:
        """The segment (0, 1, ..., non-decreasing, < max_segments) of every token of a source."""
        size = len(self.surfaces)
        texts = [self.surfaces[token_id] if token_id < size else " " for token_id in ids]
        text = "".join(texts)
        starts = segment_starts(text)
        raw, offset = [], 0
        for piece in texts:
            # the token's first non-space character; a space-only token reads the next one
            anchor = offset + (len(piece) - len(piece.lstrip()))
            raw.append(max(bisect.bisect_right(starts, anchor) - 1, 0))
            offset += len(piece)
        # number the segments that hold tokens 0, 1, ... (a boundary inside a token, or text
        # the tokenizer dropped, leaves no empty segment behind)
        dense = {segment: rank for rank, segment in enumerate(sorted(set(raw)))}
        return [min(dense[segment], self.max_segments - 1) for segment in raw]

    def batch_segment_ids(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        """(B, S) long segment ids of a padded batch (src (B, S), src_lengths (B,)), with
        `PADDING_SEGMENT` at padding; on the device of `src`."""
        rows = src.tolist()
        lengths = src_lengths.tolist()
        width = src.size(1)
        segments = [
            self.segment_ids(row[:length]) + [PADDING_SEGMENT] * (width - length)
            for row, length in zip(rows, lengths, strict=True)
        ]
        return torch.tensor(segments, dtype=torch.long, device=src.device)
