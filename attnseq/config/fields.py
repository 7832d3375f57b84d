"""`option`: how every schema field is declared, with its default, its help text (the text the
configuration reference shows) and the bounds of its value, which checks.py enforces for every
field generically."""

from collections.abc import Callable
from dataclasses import MISSING, field
from typing import Any


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    length: int | None = None,
) -> Any:
    """A schema field: its default, its help text and the bounds checks.py enforces.

    ge/gt/le/lt bound a number (or every item of a list) as >=, >, <=, <; `length` is the number
    of items a list must have. A float field is always checked to be finite as well; None (for
    an optional field) is always allowed.
    """
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt, "length": length}
    metadata = {"help": help, **{key: value for key, value in bounds.items() if value is not None}}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)
