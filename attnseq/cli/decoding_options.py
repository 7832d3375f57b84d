"""The decoding options of eval and translate: one option per field of `DecodingConfig`, typed
changes of the checkpoint's settings that win over them."""

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

from attnseq.config.checks import value_problem
from attnseq.config.schema import DecodingConfig
from attnseq.errors import UserError

OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="Overrides of the checkpoint's config, key=value (e.g. decoding.beam=3); the "
        "decoding options (--beam, --length-penalty, ...) win over them. More checkpoints "
        "(B.pt C.pt ...) decode with the first as an ensemble."
    ),
]

# the fields of DecodingConfig, each an option of its name
SETTINGS = {spec.name: spec for spec in dataclasses.fields(DecodingConfig)}
_TYPES = get_type_hints(DecodingConfig)


def option_name(setting: str) -> str:
    """The option of a decoding setting: "--length-penalty" for length_penalty."""
    return "--" + setting.replace("_", "-")


def _option(setting: str) -> Any:
    """The Typer option of one setting: its field's type (None: the checkpoint's value), its
    help; a bool setting is a flag (given: True)."""
    spec = SETTINGS[setting]
    text = spec.metadata["help"]
    text = f"{text[0].upper()}{text[1:]} (default: the checkpoint's decoding.{setting})."
    if _TYPES[setting] is bool:
        return Annotated[bool, typer.Option(option_name(setting), help=text)]
    return Annotated[_TYPES[setting] | None, typer.Option(option_name(setting), help=text)]


class DecodingFlags:
    """The decoding options of one command line: the settings given, setting -> value (an
    option left out, None or a flag not given, keeps the checkpoint's setting)."""

    def __init__(self, **options: Any) -> None:
        unknown = [name for name in options if name not in SETTINGS]
        if unknown:
            raise TypeError(f"no decoding setting {unknown[0]!r}; they are {', '.join(SETTINGS)}")
        left_out = (None, False)  # an option's default, a flag's default
        self.given = {
            name: value for name, value in options.items() if all(value is not d for d in left_out)
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DecodingFlags) and self.given == other.given

    def __repr__(self) -> str:
        return f"DecodingFlags({', '.join(f'{k}={v!r}' for k, v in self.given.items())})"

    def changes(self) -> dict[str, Any]:
        """The settings given, checked as the options that gave them (before any work):
        UserError for a value outside its setting's bounds or not finite (the command line
        reads "inf", "nan" and "1e999" as floats), a sampling option without --sample, or
        --sample with --beam or --nbest above 1."""
        from attnseq.decoding.settings import change_problems

        for setting, value in self.given.items():
            problem = value_problem(value, SETTINGS[setting].metadata)
            if problem:
                raise UserError(f"{option_name(setting)} {problem}, got {value}")
        problems = change_problems(self.given, option_name)
        if problems:
            raise UserError(problems[0])
        return dict(self.given)


# the command line's default: every decoding setting as the checkpoint has it
CHECKPOINT_SETTINGS = DecodingFlags()


def with_decoding_flags(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with one option per decoding setting (--beam, --nbest, --length-penalty, ...,
    --sample and its options) in its signature where its `decoding` parameter stands; Typer
    reads that signature, and `command` gets the values as `decoding`."""
    signature = inspect.signature(command)
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "decoding":
            parameters.append(parameter)
            continue
        parameters += [
            inspect.Parameter(
                name,
                parameter.kind,
                default=False if _TYPES[name] is bool else None,
                annotation=_option(name),
            )
            for name in SETTINGS
        ]

    @functools.wraps(command)
    def with_flags(**options: Any) -> None:
        flags = DecodingFlags(**{name: options.pop(name) for name in SETTINGS})
        command(**options, decoding=flags)

    with_flags.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    with_flags.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_flags


def checked_overrides(overrides: list[str] | None) -> list[str]:
    """`overrides` (key=value changes of the checkpoint's config), each checked: UserError for
    an argument that is no key=value (or ~key) or would change the trained model."""
    for override in overrides or []:
        key = override.split("=", 1)[0].lstrip("+~")
        if "=" not in override and not override.startswith("~"):
            raise UserError(
                f"{override!r}: arguments after the checkpoint are config overrides, key=value "
                "(e.g. decoding.beam=5); input text comes from --input or stdin"
            )
        if key.startswith("model."):
            raise UserError(
                f"{override}: model.* cannot change for a trained checkpoint (its weights are "
                "those of the model it was trained as)"
            )
    return list(overrides or [])


def split_checkpoints(arguments: list[str] | None) -> tuple[list[Path], list[str]]:
    """(more checkpoints, overrides) of the arguments after the first checkpoint: an argument
    without "=" that ends in .pt is a checkpoint (an ensemble member), the rest overrides."""
    more, overrides = [], []
    for argument in arguments or []:
        is_checkpoint = "=" not in argument and argument.endswith(".pt")
        (more if is_checkpoint else overrides).append(Path(argument) if is_checkpoint else argument)
    return more, overrides  # type: ignore[return-value]
