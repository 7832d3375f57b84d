"""The decoding options that `attnseq eval` and `attnseq translate` share, and how they become
config overrides of the checkpoint.

Both commands start from the decoding settings stored in the checkpoint (its `trainer.*` keys);
the key=value arguments after the checkpoint override them, and the flags (--beam, ...) win
over both. An option left out (None) keeps the checkpoint's value.

The options are declared once: `with_decoding_flags` puts them into a command's signature in
place of its `decoding: DecodingFlags` parameter, and hands the command the values as one
`DecodingFlags`.
"""

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Annotated, Any

import typer

from attnseq.errors import UserError

OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="Overrides of the checkpoint's config, key=value (e.g. trainer.beam=3); the "
        "decoding options (--beam, --length-penalty, ...) win over them."
    ),
]
BeamOption = Annotated[
    int | None,
    typer.Option(help="Beam size, 1 = greedy (default: the checkpoint's trainer.beam)."),
]
LengthPenaltyOption = Annotated[
    float | None,
    typer.Option(
        help="GNMT length penalty alpha, lp = ((5+|Y|)/6)^alpha; 0 ranks by log-probability, "
        "larger values favour longer outputs (default: trainer.length_penalty)."
    ),
]
MinLengthOption = Annotated[
    int | None,
    typer.Option(help="No EOS before this many tokens (default: trainer.min_output_length)."),
]
NoRepeatNgramOption = Annotated[
    int | None,
    typer.Option(
        help="Forbid repeating any n-gram of this size, 0 = off (default: trainer.no_repeat_ngram)."
    ),
]
CoveragePenaltyOption = Annotated[
    float | None,
    typer.Option(
        help="Beam search coverage penalty beta (Wu et al. 2016, eq. 14), 0 = off "
        "(default: trainer.coverage_penalty)."
    ),
]


@dataclass(frozen=True)
class DecodingFlags:
    """The decoding options of one command line; None leaves the checkpoint's setting. A
    field overrides the `trainer.*` key of its name, or the one `_TRAINER_KEYS` gives."""

    beam: int | None = None
    length_penalty: float | None = None
    min_length: int | None = None
    no_repeat_ngram: int | None = None
    coverage_penalty: float | None = None

    def overrides(self, overrides: list[str] | None) -> list[str]:
        """`overrides` followed by the options given, as `trainer.*` overrides, so that the
        flags win. UserError for an argument that is no key=value or would change the
        trained model."""
        for override in overrides or []:
            _check_override(override)
        given = [
            f"trainer.{_TRAINER_KEYS.get(field.name, field.name)}={getattr(self, field.name)}"
            for field in fields(self)
            if getattr(self, field.name) is not None
        ]
        return [*(overrides or []), *given]


# the command line's default: every decoding setting as the checkpoint has it
CHECKPOINT_SETTINGS = DecodingFlags()

# the option type of each field of DecodingFlags
_OPTIONS = {
    "beam": BeamOption,
    "length_penalty": LengthPenaltyOption,
    "min_length": MinLengthOption,
    "no_repeat_ngram": NoRepeatNgramOption,
    "coverage_penalty": CoveragePenaltyOption,
}


def with_decoding_flags(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with the decoding options (--beam, --length-penalty, --min-length,
    --no-repeat-ngram, --coverage-penalty) in its signature where its `decoding` parameter
    stands; Typer reads that signature, and `command` gets the values as `decoding`."""
    signature = inspect.signature(command)
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "decoding":
            parameters.append(parameter)
            continue
        parameters += [
            inspect.Parameter(name, parameter.kind, default=None, annotation=option)
            for name, option in _OPTIONS.items()
        ]

    @functools.wraps(command)
    def with_flags(**options: Any) -> None:
        flags = DecodingFlags(**{name: options.pop(name) for name in _OPTIONS})
        command(**options, decoding=flags)

    with_flags.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_flags


# the trainer.* key of each flag whose name differs from it
_TRAINER_KEYS = {"min_length": "min_output_length"}


def _check_override(override: str) -> None:
    """UserError unless `override` is a key=value (or ~key) that leaves the model as trained."""
    key = override.split("=", 1)[0].lstrip("+~")
    if "=" not in override and not override.startswith("~"):
        raise UserError(
            f"{override!r}: arguments after the checkpoint are config overrides, key=value "
            "(e.g. trainer.beam=5); input text comes from --input or stdin"
        )
    if key.startswith("model."):
        raise UserError(
            f"{override}: model.* cannot change for a trained checkpoint (its weights are "
            "those of the model it was trained as)"
        )
