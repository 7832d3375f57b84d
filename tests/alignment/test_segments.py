"""The segment level of hierarchical attention (attnseq/alignment/segments.py): the text of a
tokenizer kind's pieces and the segments' labels. The segment attention of decoded outputs,
saved and drawn: tests/models/test_rnn_hierarchical.py."""

import pytest

from attnseq.alignment.segments import LABEL_CHARS, join_pieces, segment_labels


@pytest.mark.parametrize(
    ("pieces", "kind", "text"),
    [
        (["the", "cat", "sat"], "word", "the cat sat"),
        (["\u2581the", "\u2581c", "at"], "sentencepiece", "the cat"),
        (["a", " ", "b"], "char", "a b"),
    ],
)
def test_pieces_read_as_their_tokenizer_writes_them(pieces, kind, text) -> None:
    assert join_pieces(pieces, kind) == text


def test_one_label_per_segment_numbered_from_1_and_cut_to_its_width() -> None:
    long = "x" * (LABEL_CHARS + 5)
    pieces, segments = ["Hi", "there", long], [0, 0, 1]
    labels = segment_labels(pieces, segments, " ".join)
    assert labels == ["1: Hi there", "2: " + "x" * (LABEL_CHARS - 1) + "…"]
    assert segment_labels([], [], " ".join) == []
