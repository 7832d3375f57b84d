"""Word precision, recall and F-measure per bucket of the reference words' training frequency:
compare-mt's word accuracy analysis (Neubig et al. 2019, NAACL demo, section 3; its
`WordBucketer.calc_statistics` and `FreqWordBucketer`)."""

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from attnseq.evaluation.buckets import Bucket

# compare-mt's FreqWordBucketer default cutoffs: the lower edges of the buckets after 0
FREQUENCY_EDGES: tuple[int, ...] = (1, 2, 3, 4, 5, 10, 100, 1000)


@dataclass(frozen=True)
class WordScore:
    """A system's words in one frequency bucket b: m_b matched, o_b output and r_b reference
    words, and

        precision_b = m_b / o_b,   recall_b = m_b / r_b,   F_b = 2 P R / (P + R),

    all three 0 when m_b = 0 (compare-mt's rule, which also covers empty buckets)."""

    matches: int
    outputs: int
    references: int
    precision: float
    recall: float
    f_measure: float

    @classmethod
    def of(cls, matches: int, outputs: int, references: int) -> "WordScore":
        if matches == 0:
            return cls(0, outputs, references, 0.0, 0.0, 0.0)
        precision, recall = matches / outputs, matches / references
        f_measure = 2 * precision * recall / (precision + recall)
        return cls(matches, outputs, references, precision, recall, f_measure)


def word_frequencies(texts: Iterable[str]) -> Counter[str]:
    """How often each whitespace-separated word occurs in `texts`."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text.split())
    return counts


def frequency_buckets(edges: Sequence[int] = FREQUENCY_EDGES) -> list[Bucket]:
    """The buckets [0, edges[0]), [edges[0], edges[1]), ..., [edges[-1], inf), counts 0."""
    bounds = [0, *edges]
    return [
        Bucket(lo, bounds[index + 1] if index + 1 < len(bounds) else None, 0)
        for index, lo in enumerate(bounds)
    ]


def word_accuracy_by_frequency(
    systems: Mapping[str, Sequence[str]],
    references: Sequence[str],
    frequencies: Mapping[str, int],
    edges: Sequence[int] = FREQUENCY_EDGES,
) -> tuple[list[Bucket], dict[str, list[WordScore]]]:
    """The frequency buckets (count: reference words in each) and, per system, its words'
    precision, recall and F-measure in each (`WordScore`). A reference word counts in the bucket
    of its training frequency, an output word in its own; in each sentence the k-th occurrence
    of a word in the output matches its k-th in the reference, so a word's matches are
    min(c_out(w), c_ref(w)) (compare-mt's `_calc_trg_matches`).

    Args:
        systems: name -> one output per reference.
        references: the reference texts.
        frequencies: word -> its count in the training targets (`word_frequencies`); a word
            not in it is unseen (0).
        edges: increasing lower edges of the buckets after the first, which starts at 0.
    """
    # a word's bucket: bisect_right(edges, frequency), compare-mt's `cutoff_into_bucket`
    reference_counts = [Counter(text.split()) for text in references]
    reference_total = [0] * (len(edges) + 1)
    for counts in reference_counts:
        for word, count in counts.items():
            reference_total[bisect_right(edges, frequencies.get(word, 0))] += count
    buckets = [
        Bucket(bucket.lo, bucket.hi, total)
        for bucket, total in zip(frequency_buckets(edges), reference_total, strict=True)
    ]
    table: dict[str, list[WordScore]] = {}
    for name, outputs in systems.items():
        matched, produced = [0] * len(buckets), [0] * len(buckets)
        for output, wanted in zip(outputs, reference_counts, strict=True):
            for word, count in Counter(output.split()).items():
                index = bisect_right(edges, frequencies.get(word, 0))
                produced[index] += count
                matched[index] += min(count, wanted.get(word, 0))
        table[name] = [
            WordScore.of(m, o, r)
            for m, o, r in zip(matched, produced, reference_total, strict=True)
        ]
    return buckets, table
