"""Source segments for hierarchical attention: the regex splitter on dialogue and plain text,
and token ids -> segment ids for word, char and sentencepiece tokenizers."""

import pytest
import torch

from attnseq.data.segments import (
    PADDING_SEGMENT,
    SourceSegmenter,
    segment_starts,
    split_segments,
    token_surfaces,
)
from attnseq.data.sentencepiece_tokenizer import train_sentencepiece
from attnseq.data.tokenizers import train_tokenizer

DIALOGUE = (
    "#Person1#: Hi, Mr. Smith. Why are you here?\n"
    "#Person2#: I need a check-up. Call #PhoneNumber# later.\n"
    "#Person1#: Ok."
)
PLAIN = 'The cat sat. Dr. Who came! "Really?" she asked. it was e.g. odd. 3 dogs ran.'


def test_dialogue_is_split_into_speaker_turns_only() -> None:
    assert split_segments(DIALOGUE) == [
        "#Person1#: Hi, Mr. Smith. Why are you here?",
        "#Person2#: I need a check-up. Call #PhoneNumber# later.",  # no colon: no split
        "#Person1#: Ok.",
    ]


def test_plain_text_is_split_into_sentences_keeping_abbreviations() -> None:
    assert split_segments(PLAIN) == [
        "The cat sat.",
        "Dr. Who came!",  # "Dr." is an abbreviation
        # no split after ?" (lower-case "she") nor after "asked." (lower-case "it")
        '"Really?" she asked. it was e.g. odd.',
        "3 dogs ran.",
    ]
    assert segment_starts("no stop at all") == [0]


def test_word_tokens_follow_their_turns() -> None:
    tokenizer = train_tokenizer("word", [DIALOGUE])
    segmenter = SourceSegmenter.from_tokenizer(tokenizer, max_segments=8)
    ids = tokenizer.encode(DIALOGUE)
    words = DIALOGUE.split()
    expected = []
    for turn, text in enumerate(split_segments(DIALOGUE)):
        expected += [turn] * len(text.split())
    assert len(words) == len(expected)
    assert segmenter.segment_ids(ids) == expected


def test_sentencepiece_tokens_follow_their_turns_and_the_cap() -> None:
    lines = [DIALOGUE, PLAIN] * 20 + ["#Person3#: more words here. And more."] * 20
    tokenizer = train_sentencepiece(lines, vocab_size=60, model_type="unigram")
    ids = tokenizer.encode(DIALOGUE)
    pieces = tokenizer.ids_to_pieces(ids)
    segments = SourceSegmenter.from_tokenizer(tokenizer, max_segments=8).segment_ids(ids)
    assert sorted(set(segments)) == [0, 1, 2] and segments == sorted(segments)
    # every turn's text is exactly the text of its pieces
    for turn, text in enumerate(split_segments(DIALOGUE)):
        turn_pieces = [p for p, s in zip(pieces, segments, strict=True) if s == turn]
        assert tokenizer.pieces_to_text(turn_pieces).strip() == text.replace("\n", " ")
    capped = SourceSegmenter.from_tokenizer(tokenizer, max_segments=2).segment_ids(ids)
    assert capped == [min(s, 1) for s in segments]  # later turns join the last segment


def test_char_tokens_and_padding_in_a_batch() -> None:
    tokenizer = train_tokenizer("char", ["Ab. Cd. e"])
    segmenter = SourceSegmenter(token_surfaces(tokenizer), max_segments=4)
    first, second = tokenizer.encode("Ab. Cd."), tokenizer.encode("e")
    assert segmenter.segment_ids(first) == [0, 0, 0, 1, 1, 1, 1]  # the space joins "Cd."
    src = torch.tensor([first, second + [0] * 6])
    batch = segmenter.batch_segment_ids(src, torch.tensor([7, 1]))
    assert batch.tolist() == [[0, 0, 0, 1, 1, 1, 1], [0] + [PADDING_SEGMENT] * 6]


def test_max_segments_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_segments"):
        SourceSegmenter([""], max_segments=0)
