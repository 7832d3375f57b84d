"""Word precision, recall and F-measure by training frequency, against counts made by hand:
clipped matches per sentence, the unseen-word bucket, compare-mt's buckets and its rule that
nothing matched scores 0."""

import pytest

from attnseq.evaluation.word_accuracy import (
    FREQUENCY_EDGES,
    WordScore,
    frequency_buckets,
    word_accuracy_by_frequency,
    word_frequencies,
)

# frequencies: the 3, cat 2, sat 2, dog 1, ran 1; on, mat, a unseen
TRAIN = ["the cat sat", "the dog sat", "the cat ran"]
REFERENCES = ["the cat sat on the mat", "a dog ran"]


def test_frequencies_and_compare_mt_buckets() -> None:
    assert word_frequencies(TRAIN) == {"the": 3, "cat": 2, "sat": 2, "dog": 1, "ran": 1}
    assert FREQUENCY_EDGES == (1, 2, 3, 4, 5, 10, 100, 1000)
    labels = [bucket.label for bucket in frequency_buckets()]
    assert labels == ["0", "1", "2", "3", "4", "5-9", "10-99", "100-999", "1000+"]


def test_scores_of_a_hand_counted_example() -> None:
    """Sentence 1: "the" three times against two in the reference (2 matches, clipped), "a"
    unseen and not in this reference (no match); sentence 2: "dog" twice against once."""
    outputs = ["the the the cat sat on a mat", "dog dog ran"]
    buckets, scores = word_accuracy_by_frequency(
        {"sys": outputs, "empty": ["", ""]}, REFERENCES, word_frequencies(TRAIN)
    )
    # reference words: unseen on, mat, a; 1: dog, ran; 2: cat, sat; 3: the, the
    assert [bucket.count for bucket in buckets] == [3, 2, 2, 2, 0, 0, 0, 0, 0]
    unseen, once, twice, thrice = scores["sys"][:4]
    # unseen: on, mat matched; "a" is output in sentence 1, whose reference lacks it
    assert unseen == WordScore(2, 3, 3, 2 / 3, 2 / 3, pytest.approx(2 / 3))
    # once: dog (output twice, matched once), ran
    assert (once.matches, once.outputs, once.references) == (2, 3, 2)
    assert (once.precision, once.recall) == (2 / 3, 1.0)
    assert once.f_measure == pytest.approx(2 * (2 / 3) / (2 / 3 + 1))  # 0.8
    assert (twice.precision, twice.recall, twice.f_measure) == (1.0, 1.0, 1.0)
    assert (thrice.matches, thrice.outputs, thrice.references) == (2, 3, 2)
    assert thrice.f_measure == pytest.approx(0.8)
    for score in scores["sys"][4:] + scores["empty"]:  # nothing matched: all 0
        assert (score.matches, score.precision, score.recall, score.f_measure) == (0, 0, 0, 0)
    assert [score.outputs for score in scores["empty"]] == [0] * 9


def test_an_output_word_counts_in_its_own_bucket_and_edges_may_be_given() -> None:
    """A frequent word output where the reference has a rare one: no match; the output word
    lowers the precision of its own (frequent) bucket, the reference word the recall of the
    rare one."""
    buckets, scores = word_accuracy_by_frequency(
        {"s": ["the"]}, ["dog"], word_frequencies(TRAIN), edges=[2]
    )
    assert [(b.label, b.count) for b in buckets] == [("0-1", 1), ("2+", 0)]
    rare, frequent = scores["s"]
    assert (rare.outputs, rare.references, rare.recall) == (0, 1, 0.0)
    assert (frequent.outputs, frequent.references, frequent.precision) == (1, 0, 0.0)
