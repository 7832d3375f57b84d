"""The API's argument checks, run before any work: a wrong type is a TypeError naming the
argument, a bad value a `UserError` in Python's words ("beam=0: must be >= 1")."""

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, get_type_hints

from attnseq.config.schema import DecodingConfig
from attnseq.errors import UserError


def _kind(value: object) -> str:
    return type(value).__name__


def integer(
    value: object,
    name: str,
    *,
    low: int | None = None,
    high: int | None = None,
    optional: bool = False,
) -> int | None:
    """`value` as an int within [low, high]; None passes when `optional`. A bool is refused
    (True is an int to Python, but `beam=True` is a mistake) and a float is never rounded."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        accepts = "an int or None" if optional else "an int"
        raise TypeError(f"{name} must be {accepts}, not {_kind(value)}")
    if low is not None and value < low:
        raise UserError(f"{name}={value}: must be >= {low}")
    if high is not None and value > high:
        raise UserError(f"{name}={value}: must be <= {high}")
    return value


def number(
    value: object,
    name: str,
    *,
    low: float | None = None,
    above: float | None = None,
    high: float | None = None,
    optional: bool = False,
) -> float | None:
    """`value` (an int or a float, not a bool) as a finite float, >= `low`, > `above` and
    <= `high` where given; None passes when `optional`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        accepts = "a number (int or float) or None" if optional else "a number (int or float)"
        raise TypeError(f"{name} must be {accepts}, not {_kind(value)}")
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if not math.isfinite(result):
        raise UserError(f"{name}={value}: must be a finite number")
    if low is not None and result < low:
        raise UserError(f"{name}={value}: must be >= {low:g}")
    if above is not None and result <= above:
        raise UserError(f"{name}={value}: must be > {above:g}")
    if high is not None and result > high:
        raise UserError(f"{name}={value}: must be <= {high:g}")
    return result


def flag(value: object, name: str) -> bool:
    """`value` when it is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {_kind(value)}")
    return value


def text(value: object, name: str, *, optional: bool = False) -> str | None:
    """`value` when it is a str that UTF-8 can write; None passes when `optional`. A lone
    surrogate (bytes decoded with errors="surrogateescape") has no UTF-8 form: a page or file
    written from it would fail after the work."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        accepts = "a str or None" if optional else "a str"
        hint = " (decode bytes first: data.decode('utf-8'))" if _is_bytes(value) else ""
        raise TypeError(f"{name} must be {accepts}, not {_kind(value)}{hint}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise UserError(
            f"{name} holds a lone surrogate {value[error.start]!r} at index {error.start}: not "
            "text UTF-8 can write (decode bytes with errors='replace', not 'surrogateescape')"
        ) from None
    return value


def texts(value: object, name: str) -> tuple[list[str], bool]:
    """(the lines, whether one str was given) of a str or an iterable of str (list, tuple,
    generator); each line checked as `text` does."""
    if isinstance(value, str):
        return [text(value, name)], True  # type: ignore[list-item]
    if _is_bytes(value) or isinstance(value, Mapping) or not isinstance(value, Iterable):
        hint = " (decode bytes first: data.decode('utf-8'))" if _is_bytes(value) else ""
        raise TypeError(f"{name} must be a str or a list of str, not {_kind(value)}{hint}")
    lines = list(value)
    for index, line in enumerate(lines):
        text(line, f"{name}[{index}]")
    return lines, False


def strings(value: object, name: str, example: str) -> list[str]:
    """`value` as a list of str (a list, tuple or other iterable; a lone str is refused, since
    its characters are not what was meant). `example` shows a valid value in the message."""
    if isinstance(value, str) or _is_bytes(value) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of str, e.g. {example}, not {_kind(value)}")
    items = list(value)
    for index, item in enumerate(items):
        text(item, f"{name}[{index}]")
    return items


def path(value: object, name: str, *, optional: bool = False) -> Path | None:
    """`value` (a str or an os.PathLike such as pathlib.Path) as a Path the operating system
    can be asked about: no NUL character, encodable as a file name. None passes when
    `optional`."""
    if value is None and optional:
        return None
    if not isinstance(value, str | os.PathLike):
        accepts = "a str or path (os.PathLike)" + (" or None" if optional else "")
        raise TypeError(f"{name} must be {accepts}, not {_kind(value)}")
    try:
        spelled = os.fspath(value)
        if isinstance(spelled, bytes):
            spelled = os.fsdecode(spelled)
        os.fsencode(spelled)
    except (TypeError, UnicodeError):
        raise UserError(f"{name}={value!r} is no file name this system can encode") from None
    if "\0" in spelled:
        raise UserError(f"{name}={spelled!r}: a file name cannot hold a NUL character")
    if not spelled:
        raise UserError(f"{name} is empty: give a file or folder")
    return Path(spelled)


def paths(value: object, name: str) -> list[Path]:
    """`value` as a list of paths (a lone str or path is refused: it names one file)."""
    if isinstance(value, str | bytes | Path) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of paths, not {type(value).__name__}")
    return [path(item, f"{name}[{index}]") for index, item in enumerate(value)]  # type: ignore[misc]


def choice(value: object, name: str, valid: Iterable[str]) -> str:
    """`value` when it is one of the names `valid`."""
    names = list(valid)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {', '.join(names)}; not {_kind(value)}")
    if value not in names:
        raise UserError(f"{name}={value!r} is not one of {', '.join(names)}")
    return value


def keywords(given: Mapping[str, Any], valid: Iterable[str], what: str) -> None:
    """TypeError for a keyword argument that is none of `valid`, as Python says it, naming
    `what` they are ("the decoding settings") and the valid ones."""
    names = list(valid)
    unknown = [key for key in given if key not in names]
    if unknown:
        raise TypeError(
            f"unexpected keyword argument {unknown[0]!r}; {what} are {', '.join(names)}"
        )


# The decoding settings `translate` and `settings` take: the fields of DecodingConfig by name,
# each checked against its field's type and the bounds the schema declares (schema.py).
DECODING_SETTINGS = {spec.name: spec for spec in dataclasses.fields(DecodingConfig)}
_DECODING_TYPES = get_type_hints(DecodingConfig)


def decoding_setting(name: str, value: object) -> object:
    """`value` checked as the decoding setting `name` (a field of DecodingConfig; None keeps
    the model's setting): TypeError unless it is of the field's type, UserError outside the
    bounds the field declares (e.g. temperature >= 1e-06, top_p in (0, 1])."""
    if value is None:
        return None
    kind, bounds = _DECODING_TYPES[name], DECODING_SETTINGS[name].metadata
    if kind is bool:
        return flag(value, name)
    if kind is int:
        low, high = bounds.get("ge"), bounds.get("le")
        return integer(value, name, low=low, high=high, optional=True)
    low, above, high = bounds.get("ge"), bounds.get("gt"), bounds.get("le")
    return number(value, name, low=low, above=above, high=high, optional=True)


def _is_bytes(value: object) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)
