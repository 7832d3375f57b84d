"""A generated toy translation task with gold word alignments: an English-like source and an
invented verb-final target whose word order differs as real language pairs do (adjectives after
the noun, postpositions, agreement), so that cross-attention has something non-monotonic to find.
"""

import random
from collections.abc import Mapping
from dataclasses import dataclass

from attnseq.data.split_sampling import fill_splits

# English singular, English plural, target stem, target gender ("o" masculine, "a" feminine).
# Plurals are written out: irregular ones must stay distinct from the singular, or the source
# would not determine the target ("fish" is left out for that reason).
NOUNS: tuple[tuple[str, str, str, str], ...] = (
    ("dog", "dogs", "kano", "o"),
    ("cat", "cats", "mirta", "a"),
    ("bird", "birds", "pilo", "o"),
    ("horse", "horses", "ekvo", "o"),
    ("fox", "foxes", "vulpa", "a"),
    ("child", "children", "nino", "o"),
    ("woman", "women", "dona", "a"),
    ("man", "men", "viro", "o"),
    ("teacher", "teachers", "magistra", "a"),
    ("doctor", "doctors", "medo", "o"),
    ("farmer", "farmers", "agro", "o"),
    ("king", "kings", "rego", "o"),
    ("queen", "queens", "regina", "a"),
    ("friend", "friends", "amiko", "o"),
    ("student", "students", "studa", "a"),
    ("house", "houses", "domo", "o"),
    ("tree", "trees", "arbo", "o"),
    ("river", "rivers", "rivera", "a"),
    ("garden", "gardens", "gardo", "o"),
    ("city", "cities", "urba", "a"),
    ("car", "cars", "auto", "o"),
    ("book", "books", "libro", "o"),
    ("table", "tables", "tabla", "a"),
    ("apple", "apples", "pomo", "o"),
    ("ball", "balls", "bala", "a"),
    ("boat", "boats", "navo", "o"),
    ("mountain", "mountains", "monta", "a"),
    ("letter", "letters", "letra", "a"),
    ("song", "songs", "melodia", "a"),
    ("window", "windows", "fenestra", "a"),
)

# English adjective, target stem; the target form is stem + gender ending ("o"/"a").
ADJECTIVES: tuple[tuple[str, str], ...] = (
    ("big", "grand"),
    ("small", "pik"),
    ("old", "vetul"),
    ("young", "jun"),
    ("red", "rug"),
    ("blue", "blu"),
    ("green", "verd"),
    ("black", "nigr"),
    ("white", "blank"),
    ("happy", "felik"),
    ("sad", "trist"),
    ("tall", "alt"),
    ("short", "kurt"),
    ("fast", "rapid"),
    ("slow", "lant"),
    ("quiet", "kviet"),
    ("loud", "laut"),
    ("kind", "bon"),
    ("strange", "strang"),
    ("beautiful", "bel"),
)

# English 3rd person singular, English plural, target stem, transitive; target plural: stem + "n".
VERBS: tuple[tuple[str, str, str, bool], ...] = (
    ("sees", "see", "vidu", True),
    ("likes", "like", "amu", True),
    ("follows", "follow", "sekvu", True),
    ("finds", "find", "trovu", True),
    ("helps", "help", "helpu", True),
    ("watches", "watch", "spektu", True),
    ("calls", "call", "voku", True),
    ("carries", "carry", "portu", True),
    ("visits", "visit", "vizitu", True),
    ("knows", "know", "konu", True),
    ("sleeps", "sleep", "dormu", False),
    ("runs", "run", "kuru", False),
    ("sings", "sing", "kantu", False),
    ("waits", "wait", "atendu", False),
    ("laughs", "laugh", "ridu", False),
)

# English determiner -> (masculine, feminine) target forms, by number. "a"/"this"/"that"/"every"
# are singular only, "these"/"those"/"some" plural only, "the" both (with different targets).
SINGULAR_DETERMINERS: dict[str, tuple[str, str]] = {
    "the": ("ko", "ka"),
    "a": ("uno", "una"),
    "this": ("esto", "esta"),
    "that": ("iro", "ira"),
    "every": ("cado", "cada"),
}
PLURAL_DETERMINERS: dict[str, tuple[str, str]] = {
    "the": ("kos", "kas"),
    "these": ("estos", "estas"),
    "those": ("iros", "iras"),
    "some": ("alkos", "alkas"),
}

PREPOSITIONS: tuple[tuple[str, str], ...] = (
    ("in", "ene"),
    ("near", "apud"),
    ("behind", "malantau"),
    ("with", "kune"),
)

ADVERBS: tuple[tuple[str, str], ...] = (
    ("quickly", "rapide"),
    ("slowly", "lante"),
    ("often", "ofte"),
    ("today", "hodiau"),
    ("again", "denove"),
)


Pair = tuple[str, str]
Link = tuple[int, int]  # (source word index, target word index)

PLURAL_PARTICLE = "ne"
PLURAL_VERB_SUFFIX = "n"

# Sampling probabilities: short sentences dominate, as in real corpora, but every construction
# (two adjectives, plurals, prepositional phrase, adverb) is frequent enough to be learned.
_ADJECTIVE_COUNT_WEIGHTS = (0.5, 0.35, 0.15)  # 0, 1, 2 adjectives
P_PLURAL = 0.3
P_TRANSITIVE = 0.7
P_PREPOSITIONAL = 0.3
P_ADVERB = 0.25


@dataclass(frozen=True)
class NounPhrase:
    """Indices into the lexicon tables: DET ADJ* NOUN."""

    determiner: str  # an English determiner (key of SINGULAR_/PLURAL_DETERMINERS)
    adjectives: tuple[int, ...]  # indices into ADJECTIVES, in source order
    noun: int  # index into NOUNS
    plural: bool


@dataclass(frozen=True)
class Clause:
    """One sentence: the structure both sides are rendered from."""

    subject: NounPhrase
    verb: int  # index into VERBS
    obj: NounPhrase | None  # only with transitive verbs
    preposition: int | None  # index into PREPOSITIONS
    prep_object: NounPhrase | None  # set exactly when `preposition` is
    adverb: int | None  # index into ADVERBS


# ------------------------------------------------------------------------------ rendering
def _source_np(np_: NounPhrase) -> list[str]:
    singular, plural, _, _ = NOUNS[np_.noun]
    adjectives = [ADJECTIVES[i][0] for i in np_.adjectives]
    return [np_.determiner, *adjectives, plural if np_.plural else singular]


def render_source(clause: Clause) -> str:
    """The English sentence of `clause` (subject-verb agreement):

    clause -> NP_subj VERB [NP_obj] [PREP NP] [ADVERB]     (NP_obj only with transitive verbs)
    NP     -> DET ADJ{0,2} NOUN                            "the big black dog", "some cats"
    """
    words = _source_np(clause.subject)
    singular_verb, plural_verb, _, _ = VERBS[clause.verb]
    words.append(plural_verb if clause.subject.plural else singular_verb)
    if clause.obj is not None:
        words += _source_np(clause.obj)
    if clause.preposition is not None and clause.prep_object is not None:
        words.append(PREPOSITIONS[clause.preposition][0])
        words += _source_np(clause.prep_object)
    if clause.adverb is not None:
        words.append(ADVERBS[clause.adverb][0])
    return " ".join(words)


def _target_np(np_: NounPhrase, first_src: int) -> tuple[list[str], list[int]]:
    """Target words of a noun phrase and, for each, the source index it translates.

    `first_src` is the source index of the phrase's determiner; the source phrase is
    DET ADJ_1 .. ADJ_k NOUN, so ADJ_i sits at first_src + i and the noun at first_src + k + 1.
    """
    _, _, stem, gender = NOUNS[np_.noun]
    table = PLURAL_DETERMINERS if np_.plural else SINGULAR_DETERMINERS
    determiner = table[np_.determiner][0 if gender == "o" else 1]
    noun_src = first_src + len(np_.adjectives) + 1
    words, sources = [determiner, stem], [first_src, noun_src]
    if np_.plural:
        # one English word, two target words: both are linked to the English plural noun
        words.append(PLURAL_PARTICLE)
        sources.append(noun_src)
    # mirror order after the noun: "big black dog" -> "dog black big"
    for position in reversed(range(len(np_.adjectives))):
        words.append(ADJECTIVES[np_.adjectives[position]][1] + gender)
        sources.append(first_src + 1 + position)
    return words, sources


def render_target(clause: Clause) -> tuple[str, set[Link]]:
    """The target sentence of `clause` and its gold alignment {(source index, target index)}:

        clause -> NP_subj [NP POSTP] [NP_obj] [ADVERB] VERB    verb-final (SOV), postpositions
        NP     -> DET NOUN [ne] ADJ{0,2}                       adjectives after the noun

    Adjectives come in mirror order, determiners and adjectives take the noun's gender (-o or
    -a), a plural noun is the stem and "ne" (both linked to it), the verb takes -n with a
    plural subject. Every source and every target word has at least one link.
    """
    # Source positions of each constituent, in English order.
    subject_start = 0
    verb_src = subject_start + len(clause.subject.adjectives) + 2
    position = verb_src + 1
    obj_start = position
    if clause.obj is not None:
        position += len(clause.obj.adjectives) + 2
    prep_src = position
    if clause.prep_object is not None:
        position += 1 + len(clause.prep_object.adjectives) + 2
    adverb_src = position

    words: list[str] = []
    sources: list[int] = []

    def add(new_words: list[str], new_sources: list[int]) -> None:
        words.extend(new_words)
        sources.extend(new_sources)

    add(*_target_np(clause.subject, subject_start))
    if clause.preposition is not None and clause.prep_object is not None:
        add(*_target_np(clause.prep_object, prep_src + 1))
        add([PREPOSITIONS[clause.preposition][1]], [prep_src])  # postposition
    if clause.obj is not None:
        add(*_target_np(clause.obj, obj_start))
    if clause.adverb is not None:
        add([ADVERBS[clause.adverb][1]], [adverb_src])
    stem = VERBS[clause.verb][2]
    add([stem + PLURAL_VERB_SUFFIX if clause.subject.plural else stem], [verb_src])
    return " ".join(words), {(src, tgt) for tgt, src in enumerate(sources)}


# -------------------------------------------------------------------------------- parsing
_NOUN_FORMS: dict[str, tuple[int, bool]] = {
    form: (i, plural)
    for i, (singular, plural_form, _, _) in enumerate(NOUNS)
    for form, plural in ((singular, False), (plural_form, True))
}
_ADJECTIVE_INDEX = {english: i for i, (english, _) in enumerate(ADJECTIVES)}
_VERB_FORMS: dict[str, tuple[int, bool]] = {
    form: (i, plural)
    for i, (singular, plural_form, _, _) in enumerate(VERBS)
    for form, plural in ((singular, False), (plural_form, True))
}
_DETERMINERS = set(SINGULAR_DETERMINERS) | set(PLURAL_DETERMINERS)
_PREPOSITION_INDEX = {english: i for i, (english, _) in enumerate(PREPOSITIONS)}
_ADVERB_INDEX = {english: i for i, (english, _) in enumerate(ADVERBS)}


def _parse_np(words: list[str], position: int, src: str) -> tuple[NounPhrase, int]:
    """Parse DET ADJ* NOUN starting at `position`; returns the phrase and the next position."""
    if position >= len(words) or words[position] not in _DETERMINERS:
        raise ValueError(f"expected a determiner at word {position} of {src!r}")
    determiner = words[position]
    position += 1
    adjectives: list[int] = []
    while position < len(words) and words[position] in _ADJECTIVE_INDEX:
        adjectives.append(_ADJECTIVE_INDEX[words[position]])
        position += 1
    if position >= len(words) or words[position] not in _NOUN_FORMS:
        raise ValueError(f"expected a noun at word {position} of {src!r}")
    noun, plural = _NOUN_FORMS[words[position]]
    table = PLURAL_DETERMINERS if plural else SINGULAR_DETERMINERS
    if determiner not in table:
        number = "plural" if plural else "singular"
        raise ValueError(f"determiner {determiner!r} cannot go with the {number} noun in {src!r}")
    return NounPhrase(determiner, tuple(adjectives), noun, plural), position + 1


def parse_source(src: str) -> Clause:
    """The `Clause` of an English sentence of the toy grammar (inverse of `render_source`).

    Raises:
        ValueError: the sentence is not in the grammar (the message says where it fails).
    """
    words = src.split()
    subject, position = _parse_np(words, 0, src)
    if position >= len(words) or words[position] not in _VERB_FORMS:
        raise ValueError(f"expected a verb at word {position} of {src!r}")
    verb, plural_verb = _VERB_FORMS[words[position]]
    if plural_verb != subject.plural:
        raise ValueError(f"the verb {words[position]!r} does not agree with its subject in {src!r}")
    position += 1
    obj = None
    if VERBS[verb][3]:
        obj, position = _parse_np(words, position, src)
    preposition = prep_object = None
    if position < len(words) and words[position] in _PREPOSITION_INDEX:
        preposition = _PREPOSITION_INDEX[words[position]]
        prep_object, position = _parse_np(words, position + 1, src)
    adverb = None
    if position < len(words) and words[position] in _ADVERB_INDEX:
        adverb = _ADVERB_INDEX[words[position]]
        position += 1
    if position != len(words):
        raise ValueError(f"unexpected word {words[position]!r} at word {position} of {src!r}")
    return Clause(subject, verb, obj, preposition, prep_object, adverb)


def translate_toy(src: str) -> tuple[str, set[Link]]:
    """Translate an English sentence of the toy grammar; returns (target, gold alignment)."""
    return render_target(parse_source(src))


# ------------------------------------------------------------------------------- sampling
def _sample_np(rng: random.Random) -> NounPhrase:
    plural = rng.random() < P_PLURAL
    table = PLURAL_DETERMINERS if plural else SINGULAR_DETERMINERS
    determiner = rng.choice(sorted(table))  # sorted: independent of dict order
    n_adjectives = rng.choices(range(len(_ADJECTIVE_COUNT_WEIGHTS)), _ADJECTIVE_COUNT_WEIGHTS)[0]
    # distinct adjectives: "the big big dog" is not a phrase worth learning
    adjectives = tuple(rng.sample(range(len(ADJECTIVES)), n_adjectives))
    return NounPhrase(determiner, adjectives, rng.randrange(len(NOUNS)), plural)


def sample_clause(rng: random.Random) -> Clause:
    """Draw one sentence structure."""
    subject = _sample_np(rng)
    transitive = rng.random() < P_TRANSITIVE
    verbs = [i for i, verb in enumerate(VERBS) if verb[3] == transitive]
    verb = rng.choice(verbs)
    obj = _sample_np(rng) if transitive else None
    preposition = prep_object = None
    if rng.random() < P_PREPOSITIONAL:
        preposition = rng.randrange(len(PREPOSITIONS))
        prep_object = _sample_np(rng)
    adverb = rng.randrange(len(ADVERBS)) if rng.random() < P_ADVERB else None
    return Clause(subject, verb, obj, preposition, prep_object, adverb)


def toy_example(rng: random.Random) -> tuple[str, str, set[Link]]:
    """One (source, target, gold alignment) triple."""
    clause = sample_clause(rng)
    tgt, links = render_target(clause)
    return render_source(clause), tgt, links


def toy_source_space_size() -> int:
    """Number of distinct source sentences of the grammar (exact: every clause renders to a
    different sentence, since `parse_source` inverts `render_source`)."""
    n_adj = len(ADJECTIVES)
    adjective_sequences = 1 + n_adj + n_adj * (n_adj - 1)
    n_dets = len(SINGULAR_DETERMINERS) + len(PLURAL_DETERMINERS)
    noun_phrases = n_dets * len(NOUNS) * adjective_sequences
    n_transitive = sum(1 for verb in VERBS if verb[3])
    n_intransitive = len(VERBS) - n_transitive
    # the verb's form is fixed by the subject's number, so it adds no choices
    predicates = n_transitive * noun_phrases + n_intransitive
    return noun_phrases * predicates * (1 + len(PREPOSITIONS) * noun_phrases) * (1 + len(ADVERBS))


# --------------------------------------------------------------------------------- splits
def make_toy_translation(
    sizes: Mapping[str, int], seed: int
) -> tuple[dict[str, list[Pair]], dict[str, list[set[Link]]]]:
    """Generate the splits of the toy translation task with their gold alignments.

    Args:
        sizes: number of pairs per split name, e.g. {"train": 20000, "valid": 500, "test": 500}.
        seed: the only source of randomness; the same arguments always give the same data, and
            a split does not change when the sizes of other splits do.

    Returns:
        (pairs, alignments): {split: [(source, target), ...]} and {split: [links, ...]} with
        links a set of (source word index, target word index), aligned with the pairs. Keys in
        the caller's order. "train" may repeat a source; every other split has distinct sources
        that appear in no other split.
    """

    def stream(name: str) -> random.Random:
        # A str seed is hashed with SHA-512 by `random.seed`: stable across processes.
        return random.Random(f"attnseq.toy_translation:{seed}:{name}")

    # The source space is astronomically large (`toy_source_space_size`), so rejection almost
    # never repeats; the attempt cap only turns a pathological case into a clear error.
    splits = fill_splits(sizes, toy_example, stream, what="the toy translation task")
    pairs = {name: [(src, tgt) for src, tgt, _ in triples] for name, triples in splits.items()}
    links = {name: [gold for _, _, gold in triples] for name, triples in splits.items()}
    return pairs, links
