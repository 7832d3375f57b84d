"""The split rule shared by the generated tasks: fixed order, one stream per split, held-out
splits of distinct sources seen in no earlier split."""

import random

import pytest

from attnseq.data.split_sampling import check_sizes, draw_unseen, fill_splits, split_order


def draw_digit(rng: random.Random) -> tuple[str, str]:
    digit = str(rng.randrange(10))  # a source space of 10
    return digit, digit * 2


def draw_number(rng: random.Random) -> tuple[str, str]:
    number = str(rng.randrange(100))
    return number, number * 2


def stream(name: str) -> random.Random:
    return random.Random(f"test:{name}")


def test_split_order_is_fixed_whatever_the_callers_order() -> None:
    assert split_order(["extra", "test", "b", "train", "valid"]) == [
        "train",
        "valid",
        "test",
        "b",
        "extra",
    ]
    assert split_order({"test": 1, "valid": 2}) == ["valid", "test"]


def test_fill_splits_held_out_sources_are_distinct_and_disjoint() -> None:
    splits = fill_splits({"test": 3, "train": 20, "valid": 4}, draw_number, stream, what="n")
    assert list(splits) == ["test", "train", "valid"]  # the caller's key order
    assert len(splits["train"]) == 20
    valid, test = [s for s, _ in splits["valid"]], [s for s, _ in splits["test"]]
    assert len(set(valid)) == 4 and len(set(test)) == 3 and not set(valid) & set(test)
    assert not set(valid) & {s for s, _ in splits["train"]}
    # the same data whatever the order of the keys
    again = fill_splits({"valid": 4, "train": 20, "test": 3}, draw_number, stream, what="n")
    assert again == splits


def test_fill_splits_refuses_what_the_space_cannot_hold() -> None:
    with pytest.raises(ValueError, match="digits has only 10 distinct sources .* split 'test'"):
        fill_splits({"valid": 6, "test": 5}, draw_digit, stream, what="digits", space=10)
    with pytest.raises(ValueError, match="could only draw 10 of 11 unseen sources for digits"):
        draw_unseen(draw_digit, random.Random(0), 11, set(), "digits", "use fewer")


def test_check_sizes() -> None:
    check_sizes({"train": 0, "valid": 3})
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="'valid'"):
            check_sizes({"valid": bad})  # type: ignore[dict-item]
