"""The toy translation task: determinism, grammar, reordering, gold alignments, splits, and its
registration among the generated tasks (with the gold alignments of copy/reverse)."""

import random
from collections import Counter

import pytest

from attnseq.data.generated import (
    TASKS,
    gold_alignments,
    make_splits,
    source_space_size,
    tokenizer_kind,
)
from attnseq.data.toy_translation import (
    ADJECTIVES,
    ADVERBS,
    NOUNS,
    PLURAL_DETERMINERS,
    PLURAL_PARTICLE,
    PREPOSITIONS,
    SINGULAR_DETERMINERS,
    VERBS,
    make_toy_translation,
    parse_source,
    render_source,
    sample_clause,
    toy_source_space_size,
    translate_toy,
)

SIZES = {"train": 400, "valid": 60, "test": 60}
VERB_FORMS = {stem + suffix for _, _, stem, _ in VERBS for suffix in ("", "n")}


ToyData = tuple[dict[str, list[tuple[str, str]]], dict[str, list[set[tuple[int, int]]]]]


@pytest.fixture(scope="module")
def data() -> ToyData:
    return make_toy_translation(SIZES, seed=11)


def test_deterministic_from_the_seed(data: ToyData) -> None:
    assert make_toy_translation(SIZES, seed=11) == data
    other_pairs, _ = make_toy_translation(SIZES, seed=12)
    assert all(other_pairs[name] != data[0][name] for name in SIZES)
    # a split does not depend on the other splits' sizes or on key order
    small, _ = make_toy_translation({"test": 5, "train": 400}, seed=11)
    assert small["train"] == data[0]["train"] and list(small) == ["test", "train"]


def test_golden_translations() -> None:
    # the big(1) dog(2) sees(3) a small(5) cat(6) in(7) the house(9): subject, postpositional
    # phrase, object, verb; adjectives after the noun, determiners by the noun's gender
    tgt, links = translate_toy("the big dog sees a small cat in the house")
    assert tgt == "ko kano grando ko domo ene una mirta pika vidu"
    assert links == {
        (0, 0),
        (2, 1),
        (1, 2),
        (8, 3),
        (9, 4),
        (7, 5),
        (4, 6),
        (6, 7),
        (5, 8),
        (3, 9),
    }
    # plural: the noun becomes stem + "ne" (one-to-many), the verb takes -n
    tgt, links = translate_toy("the dogs see the cats")
    assert tgt == "kos kano ne kas mirta ne vidun"
    assert links == {(0, 0), (1, 1), (1, 2), (3, 3), (4, 4), (4, 5), (2, 6)}
    # two adjectives in mirror order, agreeing with a feminine noun; adverb before the verb
    tgt, links = translate_toy("every old black cat sleeps quickly")
    assert tgt == "cada mirta nigra vetula rapide dormu"
    assert links == {(0, 0), (3, 1), (2, 2), (1, 3), (5, 4), (4, 5)}


def test_parse_inverts_render_and_rejects_other_text() -> None:
    rng = random.Random(0)
    for _ in range(300):
        clause = sample_clause(rng)
        assert parse_source(render_source(clause)) == clause
    for bad, message in [
        ("dog the sleeps", "determiner"),
        ("a dogs sleep", "cannot go with the plural"),
        ("the dog sleep", "does not agree"),
        ("the dog sees", "determiner at word 3"),
        ("the dog sleeps the cat", "unexpected word"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_source(bad)


def test_lexicon_is_unambiguous() -> None:
    sizes = (len(NOUNS), len(ADJECTIVES), len(VERBS))
    assert sizes == (30, 20, 15)
    english = (
        [form for noun in NOUNS for form in noun[:2]]
        + [adjective for adjective, _ in ADJECTIVES]
        + [form for verb in VERBS for form in verb[:2]]
        + [p for p, _ in PREPOSITIONS]
        + [a for a, _ in ADVERBS]
    )
    assert len(english) == len(set(english))
    assert not set(english) & (set(SINGULAR_DETERMINERS) | set(PLURAL_DETERMINERS))
    target = (
        [stem for _, _, stem, _ in NOUNS]
        + [stem + gender for _, stem in ADJECTIVES for gender in "oa"]
        + sorted(VERB_FORMS)
        + [
            form
            for table in (SINGULAR_DETERMINERS, PLURAL_DETERMINERS)
            for pair in table.values()
            for form in pair
        ]
        + [p for _, p in PREPOSITIONS]
        + [a for _, a in ADVERBS]
        + [PLURAL_PARTICLE]
    )
    duplicates = [word for word, n in Counter(target).items() if n > 1]
    assert not duplicates


def test_gold_alignments_are_valid(data: ToyData) -> None:
    pairs, alignments = data
    for name in SIZES:
        assert len(alignments[name]) == len(pairs[name]) == SIZES[name]
        for (src, tgt), links in zip(pairs[name], alignments[name], strict=True):
            src_words, tgt_words = src.split(" "), tgt.split(" ")  # single spaces only
            assert " ".join(src_words) == src and " ".join(tgt_words) == tgt
            assert all(0 <= s < len(src_words) and 0 <= t < len(tgt_words) for s, t in links)
            assert {t for _, t in links} == set(range(len(tgt_words)))  # every target word
            assert {s for s, _ in links} == set(range(len(src_words)))  # every source word
            # one link per target word (the one-to-many plurals are many targets, one source)
            assert len(links) == len(tgt_words)
            assert translate_toy(src) == (tgt, links)


def test_target_is_verb_final_and_reordered(data: ToyData) -> None:
    pairs, alignments = data
    crossing = 0
    for (src, tgt), links in zip(pairs["train"], alignments["train"], strict=True):
        tgt_words = tgt.split()
        assert tgt_words[-1] in VERB_FORMS
        # the verb's source is the word after the subject phrase, never the last target word
        verb_src = next(s for s, t in links if t == len(tgt_words) - 1)
        assert src.split()[verb_src] in {form for verb in VERBS for form in verb[:2]}
        ordered = sorted(links, key=lambda link: link[1])
        if any(a[0] > b[0] for a, b in zip(ordered, ordered[1:], strict=False)):
            crossing += 1
    # every transitive clause (70%) crosses at least at the verb, adjectives add more
    assert crossing / len(pairs["train"]) > 0.7
    lengths = Counter(len(src.split()) for src, _ in pairs["train"])
    assert min(lengths) == 3 and max(lengths) >= 12


def test_splits_disjoint(data: ToyData) -> None:
    pairs, _ = data
    valid = [src for src, _ in pairs["valid"]]
    test = [src for src, _ in pairs["test"]]
    train = {src for src, _ in pairs["train"]}
    assert len(set(valid)) == len(valid) and len(set(test)) == len(test)
    assert not train & set(valid) and not train & set(test) and not set(valid) & set(test)
    with pytest.raises(ValueError, match="'valid'"):
        make_toy_translation({"valid": -1}, seed=0)


def test_registered_as_a_generated_task(data: ToyData) -> None:
    assert "toy_translation" in TASKS
    assert tokenizer_kind("toy_translation") == "word"
    assert make_splits("toy_translation", SIZES, seed=11) == data[0]
    assert gold_alignments("toy_translation", SIZES, seed=11) == data[1]
    assert source_space_size("toy_translation") == toy_source_space_size() > 10**15


def test_gold_alignments_of_copy_and_reverse() -> None:
    sizes = {"train": 20, "valid": 5}
    for task in ("copy", "reverse"):
        splits = make_splits(task, sizes, seed=2, max_len=6)
        gold = gold_alignments(task, sizes, seed=2, max_len=6)
        assert gold is not None and list(gold) == list(sizes)
        for name in sizes:
            for (src, tgt), links in zip(splits[name], gold[name], strict=True):
                src_words, tgt_words = src.split(), tgt.split()
                # each link joins a source word to the same symbol in the target
                assert all(src_words[s] == tgt_words[t] for s, t in links)
                n = len(src_words)
                mirror = {(i, n - 1 - i) for i in range(n)}
                assert links == ({(i, i) for i in range(n)} if task == "copy" else mirror)
    assert gold_alignments("sort", sizes, seed=2) is None
    assert gold_alignments("dates", sizes, seed=2) is None
    with pytest.raises(ValueError, match="valid tasks"):
        gold_alignments("nope", sizes, seed=2)
