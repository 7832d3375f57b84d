"""Length buckets: the edges and counts, each bucket's metric recomputed on its sentences with
a bootstrap interval around it, and the output/reference length ratio, whole and by sentence."""

import pytest
import sacrebleu

from attnseq.errors import UserError
from attnseq.evaluation.buckets import (
    Bucket,
    default_edges,
    length_buckets,
    length_ratio,
    length_unit,
    make_buckets,
    ratio_bucket_counts,
    ratio_labels,
)
from attnseq.evaluation.significance import Resampling

SOURCES = ["a"] * 4 + ["a b c"] * 4 + ["a b c d e f"] * 4 + ["w " * 12] * 4


def test_default_edges_are_the_distinct_length_quartiles() -> None:
    assert default_edges(SOURCES) == [1, 3, 6, 12]
    assert default_edges(["a b"] * 5) == [2]
    buckets = make_buckets(SOURCES)
    assert [(b.label, b.count) for b in buckets] == [
        ("1-2", 4),
        ("3-5", 4),
        ("6-11", 4),
        ("12+", 4),
    ]


def test_given_edges_and_the_first_bucket_holds_shorter_sources() -> None:
    buckets = make_buckets(SOURCES, [2, 5])
    assert buckets == [Bucket(1, 5, 8), Bucket(5, None, 8)]
    with pytest.raises(UserError, match="increasing"):
        make_buckets(SOURCES, [5, 5])


def test_a_bucket_scores_its_own_sentences() -> None:
    references = [f"ref {i} words here" for i in range(16)]
    exact = [r if i % 4 else "wrong" for i, r in enumerate(references)]  # one miss per bucket
    half = [r if i < 8 else "x" for i, r in enumerate(references)]  # right in buckets 1-2
    buckets, scores = length_buckets(
        SOURCES,
        {"exact": exact, "half": half},
        references,
        "exact_match",
        resampling=Resampling(resamples=200),
    )
    assert [s.score for s in scores["exact"]] == [0.75] * 4
    assert [s.score for s in scores["half"]] == [1.0, 1.0, 0.0, 0.0]
    for row in scores.values():
        for value in row:
            assert value.low <= value.score <= value.high
    assert scores["half"][0].low == scores["half"][0].high == 1.0  # no spread to resample
    assert scores["exact"][0].low < 0.75 < scores["exact"][0].high


def test_bleu_in_a_bucket_is_sacrebleus_corpus_bleu_of_it() -> None:
    references = [f"the cat number {i} sat on the mat today" for i in range(16)]
    outputs = [r.replace("sat", "lay") if i % 2 else r for i, r in enumerate(references)]
    fifty = Resampling(resamples=50)
    _, scores = length_buckets(SOURCES, {"s": outputs}, references, "bleu", [1, 6], fifty)
    first = sacrebleu.corpus_bleu(outputs[:8], [references[:8]]).score
    second = sacrebleu.corpus_bleu(outputs[8:], [references[8:]]).score
    assert [s.score for s in scores["s"]] == pytest.approx([first, second])


def test_length_ratio() -> None:
    assert length_ratio(["a b", "c"], ["a b c", "d e f"]) == pytest.approx(0.5)
    assert length_ratio(["a"], [""]) == 0.0


def test_one_word_texts_are_measured_in_characters() -> None:
    dates = ["2001-06-05", "1998-3-3", "2001-06-05", "20-1-1"]
    assert length_unit(dates) == "characters" and length_unit(SOURCES) == "words"
    buckets = make_buckets(dates, [0, 8, 10], unit="characters")
    assert [(b.label, b.count) for b in buckets] == [("0-7", 1), ("8-9", 1), ("10+", 2)]


def test_sentences_by_length_ratio_with_ratios_on_the_edges() -> None:
    references = ["w " * 10] * 7 + ["a b c d e", ""]
    outputs = ["w " * n for n in (7, 8, 9, 10, 11, 12, 20)] + ["a b c d e f", "x"]
    # ratios 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 2.0, 6/5, and 0 for the empty reference
    assert ratio_labels() == ["< 0.8", "0.8-0.9", "0.9-1.0", "1.0-1.1", "1.1-1.2", ">= 1.2"]
    assert ratio_bucket_counts(outputs, references) == [2, 1, 1, 1, 1, 3]
    assert sum(ratio_bucket_counts(outputs, references)) == len(references)
