"""Values of JSON records as texts: every source and target must be a JSON string.

A field whose type varies between records is stored by Arrow (the `datasets` library) as JSON
text, where a list would pass for the text `["a","b"]`; so the checks here look at the values
as the records hold them, and a non-string names the file's line, the field and its JSON type.
"""

import json
from pathlib import Path
from typing import Any

from attnseq.errors import UserError

_TEXT_DTYPES = ("string", "large_string", "null")  # null: a column with no value at all
_JSON_TYPES = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}


def text_column(flat: Any, field: str, key: str, origin: str, path: Path | None) -> list[str]:
    """The values of the (flattened) column `field` of a `datasets.Dataset`, each a string
    (None, a missing value, as ""); a value of any other type is a UserError naming the line
    of `path` (or the record number of `origin`) and `key`, the config key naming the field.

    `path`: the JSON-lines file the dataset was read from. A column Arrow did not type as text
    is then read again from the file itself, since Arrow's type says little about the values:
    it parses strings such as "1998-03-03" as timestamps, and keeps a field whose type varies
    between records as JSON text.
    """
    import datasets

    feature = flat.features[field]
    values = flat.data.column(field).to_pylist()
    if isinstance(feature, datasets.Value) and feature.dtype in _TEXT_DTYPES:
        return ["" if value is None else value for value in values]
    if path is not None:
        return _raw_texts(path, field, key)
    json_feature = getattr(datasets, "Json", None)  # older versions fail on mixed types instead
    if json_feature is not None and isinstance(feature, json_feature):
        values = [None if value is None else json.loads(value) for value in values]
    for number, value in enumerate(values, start=1):
        if value is not None and not isinstance(value, str):
            raise not_text_error(f"{origin}: record {number}", field, key, value)
    return ["" if value is None else value for value in values]


def _raw_texts(path: Path, field: str, key: str) -> list[str]:
    """The values of `field` in every record of a JSON-lines file, as the file holds them."""
    texts = []
    with path.open("rb") as handle:
        # Records end at b"\n" only: a JSON string may hold a raw U+2028.
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            value = raw_field(json.loads(raw), field)
            if value is not None and not isinstance(value, str):
                raise not_text_error(f"{path}: line {number}", field, key, value)
            texts.append("" if value is None else value)
    return texts


def not_text_error(where: str, field: str, key: str, value: Any) -> UserError:
    """The error for a non-string `value` of `field` at `where` ("FILE: line N")."""
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    shown = json.dumps(value, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return UserError(
        f"{where} field {field!r} (data.{key}) holds a JSON {kind} ({shown}), not a string; "
        "every source and target must be a JSON string (null if missing); name a string "
        "field (dotted for nested objects, e.g. translation.de)"
    )


def raw_field(record: dict[str, Any], field: str) -> Any:
    """The value at a dotted path of a JSON object (None where the path does not lead)."""
    value: Any = record
    for part in field.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
