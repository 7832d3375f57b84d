"""The words of the toy translation task (toy_translation.py): English forms and the invented
target language's stems, one table per part of speech.

Plurals are written out: irregular ones must stay distinct from the singular, or the source
would not determine the target. Target genders are "o" (masculine) and "a" (feminine); a target
adjective or determiner takes the gender of its noun.
"""

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
