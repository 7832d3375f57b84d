"""The configuration reference page, generated from the schema and the packaged config groups:

python -m attnseq.config.reference > docs/reference/configuration.md"""

import dataclasses
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from attnseq.config import CONFIG_DIR
from attnseq.config.choices import ModelFamily
from attnseq.config.schema import TrainConfig

GROUPS = ("data", "model", "optim", "trainer", "experiment", "hparams_search")
_BOUND_SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
# the label of a key that one model family alone reads (its field's `family`)
FAMILY_LABELS = {ModelFamily.rnn: "(RNN)", ModelFamily.transformer: "(transformer)"}


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One config key as the reference shows it."""

    key: str  # dotted, e.g. model.attention.kind
    type_name: str
    default: str
    help: str
    rule: str  # bounds and choices, e.g. ">= 1" or "one of: gru, lstm"


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (annotation, False)."""
    arguments = [arg for arg in get_args(annotation) if arg is not type(None)]
    if get_origin(annotation) is not None and len(arguments) < len(get_args(annotation)):
        return (arguments[0] if len(arguments) == 1 else annotation), True
    return annotation, False


def _type_name(annotation: Any) -> str:
    inner, optional = _unwrap_optional(annotation)
    if isinstance(inner, type) and issubclass(inner, Enum):
        name = "choice"
    elif get_origin(inner) in (Union, UnionType):  # e.g. trainer.threads: int, "auto" or null
        name = " or ".join(arg.__name__ for arg in get_args(inner) if arg is not type(None))
        return f"{name} or null" if optional else name
    elif get_origin(inner) is not None:
        name = str(inner).replace("typing.", "")
    else:
        name = getattr(inner, "__name__", str(inner))
    return f"{name} or null" if optional else name


def _default_text(spec: dataclasses.Field) -> str:
    if spec.default is not dataclasses.MISSING:
        value = spec.default
    elif spec.default_factory is not dataclasses.MISSING:
        value = spec.default_factory()
    else:
        return "(required)"
    if isinstance(value, Enum):
        return value.name
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value)


def _rule(annotation: Any, metadata: Any) -> str:
    inner, _ = _unwrap_optional(annotation)
    parts = [
        f"{sign} {metadata[bound]}" for bound, sign in _BOUND_SIGNS.items() if bound in metadata
    ]
    if "words" in metadata:  # an `int | str` field: its numbers' bounds or its words
        parts = [" or ".join([*(["; ".join(parts)] if parts else []), *metadata["words"]])]
    if "length" in metadata:
        parts.append(f"{metadata['length']} items")
    if isinstance(inner, type) and issubclass(inner, Enum):
        parts.append("one of: " + ", ".join(member.name for member in inner))
    return "; ".join(parts)


def keys(
    config_class: type = TrainConfig, prefix: str = "", family: ModelFamily | None = None
) -> Iterator[KeyDoc]:
    """Every leaf key of the schema, depth first in declaration order; `family`: the model
    family that alone reads the keys of `config_class` (a node's family is its keys')."""
    hints = get_type_hints(config_class)
    for spec in dataclasses.fields(config_class):
        annotation = hints[spec.name]
        inner, _ = _unwrap_optional(annotation)
        reader = spec.metadata.get("family", family)
        if dataclasses.is_dataclass(inner):
            yield from keys(inner, f"{prefix}{spec.name}.", reader)
            continue
        text = spec.metadata.get("help", "")
        yield KeyDoc(
            key=f"{prefix}{spec.name}",
            type_name=_type_name(annotation),
            default=_default_text(spec),
            help=f"{FAMILY_LABELS[reader]} {text}" if reader is not None else text,
            rule=_rule(annotation, spec.metadata),
        )


def group_options(config_dir: Path = CONFIG_DIR) -> dict[str, list[tuple[str, str]]]:
    """Each config group's options with the first comment line of its file as description."""
    options: dict[str, list[tuple[str, str]]] = {}
    for group in GROUPS:
        rows = []
        for path in sorted((config_dir / group).glob("*.yaml")):
            comments = [
                line.lstrip("# ").strip()
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.startswith("#") and not line.startswith("# @package")
            ]
            rows.append((path.stem, comments[0] if comments else ""))
        options[group] = rows
    return options


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole reference page as Markdown."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `attnseq/config/schema.py` and the packaged config groups by",
        "`python -m attnseq.config.reference`; do not edit by hand. Every key can be set on the",
        "command line (`attnseq train model.hidden=256`) or in an experiment file; a value",
        "outside its bounds or an unknown key ends with one message and exit status 2.",
        "",
        "A `model.*` key marked (RNN) or (transformer) is read by that model family alone; a",
        "run of the other family that sets it away from its default is refused, as its model",
        "would ignore it. The other `model.*` keys serve both families.",
        "",
        "## Config groups",
        "",
        "Choose an option with `attnseq train GROUP=OPTION`; experiments with `config=NAME`.",
        "",
    ]
    for group, rows in group_options().items():
        lines += [f"### `{group}`", "", "| option | description |", "|---|---|"]
        lines += [f"| `{name}` | {_cell(description)} |" for name, description in rows]
        lines.append("")
    lines += ["## Keys", ""]
    sections: dict[str, list[KeyDoc]] = {}
    for doc in keys():
        sections.setdefault(doc.key.split(".")[0] if "." in doc.key else "top level", []).append(
            doc
        )
    for head, docs in sections.items():
        lines += [
            f"### {head}",
            "",
            "| key | type | default | rule | help |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{doc.key}` | {_cell(doc.type_name)} | `{_cell(doc.default)}` | "
            f"{_cell(doc.rule)} | {_cell(doc.help)} |"
            for doc in docs
        ]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
