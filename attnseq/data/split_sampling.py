"""How a generated task fills its splits from a seed (`fill_splits`): "train" draws freely, every
other split holds distinct sources that no split drawn before it holds."""

import random
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

Item = TypeVar("Item", bound=tuple)


def check_sizes(sizes: Mapping[str, int]) -> None:
    """ValueError unless every split size is an int >= 0."""
    for name, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"size of split {name!r} must be an int >= 0, got {size!r}")


def split_order(names: Iterable[str]) -> list[str]:
    """The order splits are drawn in: train, valid, test, then the rest alphabetically."""
    names = list(names)
    canonical = [name for name in ("train", "valid", "test") if name in names]
    return canonical + sorted(name for name in names if name not in canonical)


def fill_splits(
    sizes: Mapping[str, int],
    draw: Callable[[random.Random], Item],
    stream: Callable[[str], random.Random],
    *,
    what: str,
    space: int | None = None,
    space_note: str = "",
    hint: str = "",
) -> dict[str, list[Item]]:
    """Every split of `sizes`, keys in the caller's order.

    Args:
        sizes: number of items per split name (checked with `check_sizes`).
        draw: one item from a random stream.
        stream: the random stream of a split name.
        what: the task, for error messages ("task 'reverse'").
        space: the number of distinct sources, when it is small enough to run out (None:
            never); a held-out split larger than what is left of it is refused up front.
        space_note: what the space depends on, for that message (" (max_len=12)").
        hint: what the user can change when the sources run out.
    """
    check_sizes(sizes)
    splits: dict[str, list[Item]] = {}
    seen: set[str] = set()  # sources of every split drawn so far
    for name in split_order(sizes):
        size = sizes[name]
        rng = stream(name)
        if name == "train":
            items = [draw(rng) for _ in range(size)]
        else:
            if space is not None and size > space - len(seen):
                raise ValueError(
                    f"{what} has only {space} distinct sources{space_note} and {len(seen)} are "
                    f"already used by earlier splits: cannot draw {size} unseen ones for split "
                    f"{name!r}; {hint}"
                )
            items = draw_unseen(draw, rng, size, seen, f"split {name!r} of {what}", hint)
        seen.update(item[0] for item in items)
        splits[name] = items
    return {name: splits[name] for name in sizes}


def draw_unseen(
    draw: Callable[[random.Random], Item],
    rng: random.Random,
    size: int,
    seen: set[str],
    what: str,
    hint: str = "",
) -> list[Item]:
    """`size` items whose sources are distinct and not in `seen` (rejection sampling)."""
    items: list[Item] = []
    taken: set[str] = set()
    # Rejection only gets slow when nearly every source is used; give up clearly then rather
    # than loop for minutes (short sequences are much likelier than long ones, so an almost
    # exhausted space can take far more draws than it has members).
    max_attempts = 200 * size + 100_000
    attempts = 0
    while len(items) < size:
        attempts += 1
        if attempts > max_attempts:
            raise ValueError(
                f"could only draw {len(items)} of {size} unseen sources for {what} in "
                f"{max_attempts} attempts: the source space is nearly exhausted"
                + (f"; {hint}" if hint else "")
            )
        item = draw(rng)
        if item[0] in seen or item[0] in taken:
            continue
        taken.add(item[0])
        items.append(item)
    return items
