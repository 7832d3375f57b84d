"""Generated seq2seq tasks (`TASKS`: dates, reverse, copy, sort, toy_translation), built from a
seed so that `attnseq train` works offline with no download."""

import datetime
import functools
import random
from collections.abc import Callable, Mapping
from typing import Literal

from attnseq.data.split_sampling import check_sizes, fill_splits
from attnseq.data.toy_translation import make_toy_translation, toy_source_space_size

TASKS: tuple[str, ...] = ("dates", "reverse", "copy", "sort", "toy_translation")

Pair = tuple[str, str]

# ---------------------------------------------------------------------------------- dates
FIRST_DATE = datetime.date(1950, 1, 1)
LAST_DATE = datetime.date(2049, 12, 31)

# Written out rather than taken from `calendar`, whose names follow the process locale.
MONTH_NAMES: tuple[str, ...] = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
MONTH_ABBREVIATIONS: tuple[str, ...] = tuple(name[:3] for name in MONTH_NAMES)
WEEKDAY_NAMES: tuple[str, ...] = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)
WEEKDAY_ABBREVIATIONS: tuple[str, ...] = tuple(name[:3] for name in WEEKDAY_NAMES)

# A source must determine its target, so a numeric format's field order shows in the string:
# a four-digit year first is year-month-day, else "/" is US month/day/year and "." or "-"
# European day.month.year ("-" only with four-digit years); two-digit years are 1950-2049.
# `str.format` templates over the fields of `date_fields`:
#   YYYY 1998 | YY 98 | M 3 | MM 03 | MMMM March | MMM Mar | D 3 | DD 03 | Do 3rd
#   dddd Tuesday | ddd Tue
DATE_FORMATS: tuple[str, ...] = (
    # month names
    "{MMMM} {D}, {YYYY}",
    "{MMMM} {D} {YYYY}",
    "{D} {MMMM} {YYYY}",
    "{MMM} {D}, {YYYY}",
    "{MMM} {D} {YY}",
    "{MMM} {D} '{YY}",
    "{D} {MMM} {YYYY}",
    "{DD} {MMM} {YY}",
    "{D}-{MMM}-{YYYY}",
    # ordinals
    "{MMMM} {Do}, {YYYY}",
    "{Do} {MMMM} {YYYY}",
    "the {Do} of {MMMM} {YYYY}",
    "{Do} of {MMMM}, {YYYY}",
    "{MMM} {Do} {YY}",
    # weekdays
    "{dddd}, {MMMM} {D}, {YYYY}",
    "{dddd} {D} {MMMM} {YYYY}",
    "{dddd}, the {Do} of {MMMM} {YYYY}",
    "{ddd}, {D} {MMM} {YYYY}",
    "{ddd} {MMM} {DD} {YYYY}",
    # numeric, US month/day/year with "/"
    "{MM}/{DD}/{YYYY}",
    "{M}/{D}/{YYYY}",
    "{MM}/{DD}/{YY}",
    "{M}/{D}/{YY}",
    # numeric, European day.month.year with "." and "-"
    "{DD}.{MM}.{YYYY}",
    "{D}.{M}.{YYYY}",
    "{D}.{M}.{YY}",
    "{DD}-{MM}-{YYYY}",
    "{D}-{M}-{YYYY}",
    # numeric, year first (four digits) -> year-month-day
    "{YYYY}-{M}-{D}",
    "{YYYY}-{MM}-{DD}",
    "{YYYY}/{MM}/{DD}",
    "{YYYY}{MM}{DD}",
)

Case = Literal["title", "lower", "upper"]
DATE_CASES: tuple[Case, ...] = ("title", "lower", "upper")
# Mostly the usual capitalisation; some lower and upper case so the model learns case variety.
_CASE_WEIGHTS: tuple[float, ...] = (0.6, 0.25, 0.15)


def ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 3 -> "3rd", 4 -> "4th", 11..13 -> "11th".."13th", 21 -> "21st"."""
    if 11 <= n % 100 <= 13:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def date_fields(d: datetime.date) -> dict[str, str]:
    """The values the `DATE_FORMATS` templates refer to (title case), e.g. {"Do": "3rd", ...}."""
    return {
        "YYYY": f"{d.year:04d}",
        "YY": f"{d.year % 100:02d}",
        "M": str(d.month),
        "MM": f"{d.month:02d}",
        "MMMM": MONTH_NAMES[d.month - 1],
        "MMM": MONTH_ABBREVIATIONS[d.month - 1],
        "D": str(d.day),
        "DD": f"{d.day:02d}",
        "Do": ordinal(d.day),
        "dddd": WEEKDAY_NAMES[d.weekday()],
        "ddd": WEEKDAY_ABBREVIATIONS[d.weekday()],
    }


def render_date(d: datetime.date, fmt: str, case: Case = "title") -> str:
    """Write `d` in format `fmt` (one of `DATE_FORMATS`, or any template over the same fields).

    `case`: "title" keeps the usual capitalisation ("the 3rd of March 1998"), "lower" and
    "upper" convert the whole string.
    """
    if not FIRST_DATE <= d <= LAST_DATE:
        # Outside 1950-2049 a two-digit year would not map back to the right century.
        raise ValueError(f"date {d.isoformat()} outside {FIRST_DATE} .. {LAST_DATE}")
    text = fmt.format_map(date_fields(d))
    if case == "lower":
        return text.lower()
    if case == "upper":
        return text.upper()
    if case == "title":
        return text
    raise ValueError(f"unknown case {case!r}; valid: {', '.join(DATE_CASES)}")


def _date_example(rng: random.Random) -> Pair:
    d = datetime.date.fromordinal(rng.randint(FIRST_DATE.toordinal(), LAST_DATE.toordinal()))
    fmt = rng.choice(DATE_FORMATS)
    case = rng.choices(DATE_CASES, weights=_CASE_WEIGHTS)[0]
    return render_date(d, fmt, case), d.isoformat()


# --------------------------------------------------------------------------- symbol tasks
def symbol_alphabet(vocab_size: int) -> list[str]:
    """The symbols of the symbol tasks, in sort order: "a".."z", "a1".."z1", "a2", ..."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [letters[i % 26] + (str(i // 26) if i >= 26 else "") for i in range(vocab_size)]


def _symbol_example(
    rng: random.Random,
    alphabet: list[str],
    min_len: int,
    max_len: int,
    transform: Callable[[list[int]], list[int]],
) -> Pair:
    # Work on alphabet indices so that "sort" orders by index ("b" < "a1"), not by string.
    ids = [rng.randrange(len(alphabet)) for _ in range(rng.randint(min_len, max_len))]
    src = " ".join(alphabet[i] for i in ids)
    tgt = " ".join(alphabet[i] for i in transform(ids))
    return src, tgt


_SYMBOL_TRANSFORMS: dict[str, Callable[[list[int]], list[int]]] = {
    "reverse": lambda ids: ids[::-1],
    "copy": lambda ids: list(ids),
    "sort": sorted,
}


def tokenizer_kind(task: str) -> Literal["char", "word"]:
    """The tokenizer a generated task is meant for: "char" for dates, "word" for the others."""
    _check_task(task)
    return "char" if task == "dates" else "word"


def source_space_size(
    task: str, *, min_len: int = 3, max_len: int = 12, vocab_size: int = 20
) -> int:
    """Number of distinct source strings the task can produce.

    Exact for symbol tasks (sum of vocab_size**L over the lengths) and for toy_translation
    (which ignores the length/vocabulary arguments). For dates it is the number of
    (date, format, case) combinations, an upper bound on distinct strings (some coincide, e.g.
    "May" is its own abbreviation, and numeric formats do not change with case).
    """
    _check_task(task)
    if task == "toy_translation":
        return toy_source_space_size()
    if task == "dates":
        n_days = LAST_DATE.toordinal() - FIRST_DATE.toordinal() + 1
        return n_days * len(DATE_FORMATS) * len(DATE_CASES)
    _check_symbol_args(min_len, max_len, vocab_size)
    return sum(vocab_size**length for length in range(min_len, max_len + 1))


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown generated task {task!r}; valid tasks: {', '.join(TASKS)}")


def _check_symbol_args(min_len: int, max_len: int, vocab_size: int) -> None:
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")


def make_splits(
    task: str,
    sizes: Mapping[str, int],
    seed: int,
    *,
    min_len: int = 3,
    max_len: int = 12,
    vocab_size: int = 20,
) -> dict[str, list[Pair]]:
    """Generate the splits of a task: e.g. sizes={"train": 20000, "valid": 500, "test": 500}.

    Args:
        task: one of `TASKS`.
        sizes: number of (source, target) pairs per split name.
        seed: the only source of randomness; the same arguments always give the same splits.
        min_len, max_len, vocab_size: symbol tasks only (ignored for dates and toy_translation).

    Returns:
        {split name: [(source, target), ...]} with exactly the requested sizes, keys in the
        caller's order. "train" may repeat a source; every other split has distinct sources,
        none of which appears in any other split.

    Raises:
        ValueError: unknown task, bad sizes or lengths, or a source space too small to fill the
            held-out splits with unseen sources.
    """
    _check_task(task)
    check_sizes(sizes)
    if task == "toy_translation":
        return make_toy_translation(sizes, seed)[0]
    space: int | None = None  # None: too large to ever run out (dates)
    draw: Callable[[random.Random], Pair] = _date_example
    if task != "dates":
        _check_symbol_args(min_len, max_len, vocab_size)
        space = source_space_size(task, min_len=min_len, max_len=max_len, vocab_size=vocab_size)
        draw = functools.partial(
            _symbol_example,
            alphabet=symbol_alphabet(vocab_size),
            min_len=min_len,
            max_len=max_len,
            transform=_SYMBOL_TRANSFORMS[task],
        )

    def stream(name: str) -> random.Random:
        # A str seed goes through SHA-512 in `random.seed`, so it is stable across processes
        # (unlike hash()) and gives each split an independent stream.
        return random.Random(f"attnseq.generated:{task}:{seed}:{name}")

    return fill_splits(
        sizes,
        draw,
        stream,
        what=f"task {task!r}",
        space=space,
        space_note=f" (min_len={min_len}, max_len={max_len}, vocab_size={vocab_size})",
        hint="use smaller splits or a larger vocab_size/max_len",
    )


def gold_alignments(
    task: str, sizes: Mapping[str, int], seed: int, **symbol_args: int
) -> dict[str, list[set[tuple[int, int]]]] | None:
    """Gold word alignments of the splits `make_splits` builds from the same arguments
    (`symbol_args`: its min_len, max_len and vocab_size).

    Returns:
        {split name: [links of each pair, ...]} in the order of `make_splits(...)[split]`, links
        being sets of (source word index, target word index), all of them sure; or None for tasks
        without a word correspondence ("dates", character-level) or with an ambiguous one
        ("sort": equal symbols could align either way). "copy" aligns i with i, "reverse" i with
        n - 1 - i (the anti-diagonal a trained model's heatmap should show).
    """
    _check_task(task)
    if task == "toy_translation":
        return make_toy_translation(sizes, seed)[1]
    if task not in ("copy", "reverse"):
        return None
    splits = make_splits(task, sizes, seed, **symbol_args)
    alignments: dict[str, list[set[tuple[int, int]]]] = {}
    for name, pairs in splits.items():
        lengths = [len(src.split(" ")) for src, _ in pairs]
        if task == "copy":
            alignments[name] = [{(i, i) for i in range(n)} for n in lengths]
        else:
            alignments[name] = [{(i, n - 1 - i) for i in range(n)} for n in lengths]
    return alignments
