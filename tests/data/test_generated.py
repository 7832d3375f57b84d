"""Generated tasks: determinism, split sizes and disjointness, and correct targets."""

import datetime
import re

import pytest

from attnseq.data.generated import (
    DATE_CASES,
    DATE_FORMATS,
    FIRST_DATE,
    LAST_DATE,
    TASKS,
    WEEKDAY_NAMES,
    Case,
    date_fields,
    make_splits,
    ordinal,
    render_date,
    source_space_size,
    symbol_alphabet,
    tokenizer_kind,
)

SIZES = {"train": 300, "valid": 50, "test": 50}


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_splits_other_seed_different(task: str) -> None:
    a = make_splits(task, SIZES, seed=7)
    b = make_splits(task, SIZES, seed=7)
    c = make_splits(task, SIZES, seed=8)
    assert a == b
    for split in SIZES:
        assert a[split] != c[split]


@pytest.mark.parametrize("task", TASKS)
def test_split_sizes_and_disjoint_held_out(task: str) -> None:
    splits = make_splits(task, SIZES, seed=0)
    assert list(splits) == list(SIZES)
    assert {name: len(pairs) for name, pairs in splits.items()} == SIZES
    train = {src for src, _ in splits["train"]}
    valid = [src for src, _ in splits["valid"]]
    test = [src for src, _ in splits["test"]]
    assert len(set(valid)) == len(valid) and len(set(test)) == len(test)
    assert not train & set(valid)
    assert not train & set(test)
    assert not set(valid) & set(test)


def test_train_does_not_depend_on_held_out_sizes_or_key_order() -> None:
    small = make_splits("reverse", {"train": 100, "valid": 5}, seed=3)
    large = make_splits("reverse", {"test": 50, "valid": 500, "train": 100}, seed=3)
    assert small["train"] == large["train"]
    assert list(large) == ["test", "valid", "train"]  # caller's key order is kept


def test_space_too_small_raises_clear_error() -> None:
    # vocab 2, length 3: 8 distinct sources; 300 training draws see them all.
    with pytest.raises(ValueError, match="only 8 distinct sources"):
        make_splits("copy", SIZES, seed=0, min_len=3, max_len=3, vocab_size=2)
    # Without a training split the 8 sources can be shared out exactly.
    splits = make_splits(
        "copy", {"valid": 5, "test": 3}, seed=0, min_len=3, max_len=3, vocab_size=2
    )
    assert len({src for pairs in splits.values() for src, _ in pairs}) == 8


def test_unknown_task_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="dates, reverse, copy, sort"):
        make_splits("translate", SIZES, seed=0)
    with pytest.raises(ValueError, match="valid tasks"):
        tokenizer_kind("nope")


def test_bad_sizes_and_lengths() -> None:
    with pytest.raises(ValueError, match="'train'"):
        make_splits("copy", {"train": -1}, seed=0)
    with pytest.raises(ValueError, match="min_len"):
        make_splits("copy", {"train": 1}, seed=0, min_len=5, max_len=4)


def test_tokenizer_kind() -> None:
    assert tokenizer_kind("dates") == "char"
    assert [tokenizer_kind(t) for t in ("reverse", "copy", "sort")] == ["word"] * 3


# -------------------------------------------------------------------------------- symbols
def test_symbol_alphabet() -> None:
    alphabet = symbol_alphabet(30)
    assert alphabet[:3] == ["a", "b", "c"]
    assert alphabet[25:] == ["z", "a1", "b1", "c1", "d1"]
    assert len(set(symbol_alphabet(200))) == 200


@pytest.mark.parametrize("task", ["reverse", "copy", "sort"])
def test_symbol_targets_and_lengths(task: str) -> None:
    vocab_size, min_len, max_len = 30, 2, 9
    alphabet = symbol_alphabet(vocab_size)
    rank = {symbol: i for i, symbol in enumerate(alphabet)}
    pairs = make_splits(
        task, {"train": 500}, seed=1, min_len=min_len, max_len=max_len, vocab_size=vocab_size
    )["train"]
    lengths = set()
    for src, tgt in pairs:
        symbols = src.split(" ")  # single spaces only
        assert " ".join(symbols) == src and all(s in rank for s in symbols)
        lengths.add(len(symbols))
        expected = {
            "reverse": symbols[::-1],
            "copy": symbols,
            "sort": sorted(symbols, key=rank.__getitem__),
        }[task]
        assert tgt == " ".join(expected)
    assert lengths == set(range(min_len, max_len + 1))


def test_sort_orders_by_alphabet_index_not_string() -> None:
    pairs = make_splits("sort", {"train": 2000}, seed=0, vocab_size=40)["train"]
    # "b" (index 1) sorts before "a1" (index 26) although "a1" < "b" as strings.
    assert any("b" in tgt.split() and "a1" in tgt.split() for _, tgt in pairs)
    for _, tgt in pairs:
        symbols = tgt.split()
        if "b" in symbols and "a1" in symbols:
            assert symbols.index("b") < symbols.index("a1")


def test_symbol_golden_values() -> None:
    # Pinned: a change in the generator (and so in every generated dataset) must be deliberate.
    assert make_splits("reverse", {"train": 2}, seed=1, vocab_size=30)["train"] == [
        ("g p l l d1", "d1 l l p g"),
        ("c c1 q m n b1 m c v", "v c m b1 n m q c1 c"),
    ]


def test_source_space_size() -> None:
    assert source_space_size("copy", min_len=1, max_len=2, vocab_size=3) == 3 + 9
    assert source_space_size("dates") > 10**6


# ---------------------------------------------------------------------------------- dates
def test_dates_targets_are_valid_iso_dates_in_range() -> None:
    splits = make_splits("dates", {"train": 2000, "valid": 200, "test": 200}, seed=5)
    for pairs in splits.values():
        for _, tgt in pairs:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", tgt)
            assert FIRST_DATE <= datetime.date.fromisoformat(tgt) <= LAST_DATE


def test_dates_use_many_formats_and_cases() -> None:
    sources = [src for src, _ in make_splits("dates", {"train": 3000}, seed=2)["train"]]
    assert any(src.islower() for src in sources)
    assert any(src.isupper() for src in sources)
    assert any(re.search(r"\b(\d+)(st|nd|rd|th)\b", src) for src in sources)
    assert any(re.fullmatch(r"\d{1,2}\.\d{1,2}\.\d{2}", src) for src in sources)
    assert any(re.fullmatch(r"\d{1,2}/\d{1,2}/\d{4}", src) for src in sources)


def test_weekdays_are_correct() -> None:
    pairs = make_splits("dates", {"train": 3000}, seed=4)["train"]
    names = {name.lower(): i for i, name in enumerate(WEEKDAY_NAMES)}
    names.update({name[:3].lower(): i for i, name in enumerate(WEEKDAY_NAMES)})
    checked = 0
    for src, tgt in pairs:
        first = re.split(r"[ ,]", src, maxsplit=1)[0].lower()
        if first in names:
            assert datetime.date.fromisoformat(tgt).weekday() == names[first], (src, tgt)
            checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    ("fmt", "case", "expected"),
    [
        ("{MMMM} {D}, {YYYY}", "title", "March 3, 1998"),
        ("{D} {MMMM} {YYYY}", "title", "3 March 1998"),
        ("{MMM} {D} {YY}", "title", "Mar 3 98"),
        ("{MMMM} {Do}, {YYYY}", "title", "March 3rd, 1998"),
        ("the {Do} of {MMMM} {YYYY}", "title", "the 3rd of March 1998"),
        ("the {Do} of {MMMM} {YYYY}", "upper", "THE 3RD OF MARCH 1998"),
        ("{dddd}, {MMMM} {D}, {YYYY}", "title", "Tuesday, March 3, 1998"),
        ("{dddd}, {MMMM} {D}, {YYYY}", "lower", "tuesday, march 3, 1998"),
        ("{ddd}, {D} {MMM} {YYYY}", "title", "Tue, 3 Mar 1998"),
        ("{MM}/{DD}/{YYYY}", "title", "03/03/1998"),
        ("{D}.{M}.{YY}", "title", "3.3.98"),
        ("{YYYY}-{M}-{D}", "title", "1998-3-3"),
        ("{DD}-{MM}-{YYYY}", "title", "03-03-1998"),
        ("{YYYY}{MM}{DD}", "title", "19980303"),
    ],
)
def test_render_date_golden(fmt: str, case: Case, expected: str) -> None:
    assert fmt in DATE_FORMATS
    assert render_date(datetime.date(1998, 3, 3), fmt, case) == expected  # a Tuesday


def test_numeric_field_order_follows_the_documented_convention() -> None:
    d = datetime.date(2012, 11, 5)  # day 5, month 11: the order is visible
    assert render_date(d, "{M}/{D}/{YY}") == "11/5/12"  # US month/day/year
    assert render_date(d, "{D}.{M}.{YY}") == "5.11.12"  # European day.month.year
    assert render_date(d, "{D}-{M}-{YYYY}") == "5-11-2012"
    assert render_date(d, "{YYYY}-{M}-{D}") == "2012-11-5"  # four-digit year first: y-m-d
    assert (
        render_date(datetime.date(2049, 2, 1), "{Do} of {MMMM}, {YYYY}") == "1st of February, 2049"
    )


def test_two_digit_year_convention() -> None:
    assert render_date(datetime.date(1950, 1, 1), "{M}/{D}/{YY}") == "1/1/50"
    assert render_date(datetime.date(2049, 12, 31), "{M}/{D}/{YY}") == "12/31/49"
    with pytest.raises(ValueError, match="outside"):
        render_date(datetime.date(2050, 1, 1), "{M}/{D}/{YY}")


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 30, 31)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "23rd",
        "30th",
        "31st",
    ]


@pytest.mark.slow
def test_every_source_string_determines_its_date() -> None:
    # Render every date of 1950-2049 in every format into one table: no string may stand for
    # two dates, within a format or across formats.
    first, last = FIRST_DATE.toordinal(), LAST_DATE.toordinal()
    dates = [datetime.date.fromordinal(n) for n in range(first, last + 1)]
    owner: dict[str, datetime.date] = {}
    clashes = []  # a plain `if` in the loop: pytest's assert rewriting would triple the time
    for d in dates:
        fields = date_fields(d)  # what render_date does, minus its per-call checks (speed)
        for fmt in DATE_FORMATS:
            text = fmt.format_map(fields)
            if owner.setdefault(text, d) != d:
                clashes.append((fmt, text, d, owner[text]))
    assert not clashes[:10]
    assert len(owner) > 1_000_000
    # Lower/upper case can only add clashes between strings that differ in case alone:
    # check a sample of dates in every case against one table.
    owner = {}
    for d in dates[::29]:
        for fmt in DATE_FORMATS:
            for case in DATE_CASES:
                text = render_date(d, fmt, case)
                assert owner.setdefault(text, d) == d, (fmt, text)
