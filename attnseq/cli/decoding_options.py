"""The decoding options that `attnseq eval` and `attnseq translate` share, and how they become
config overrides of the checkpoint.

Both commands start from the decoding settings stored in the checkpoint (its `trainer.*` keys);
the key=value arguments after the checkpoint override them, and the flags (--beam, ...) win
over both. An option left out (None) keeps the checkpoint's value.

The options are declared once: `with_decoding_flags` puts them into a command's signature in
place of its `decoding: DecodingFlags` parameter, and hands the command the values as one
`DecodingFlags`.

Sampling (--sample with --temperature, --top-k, --top-p, --num-samples, --seed) is no setting
of the checkpoint: `DecodingFlags.sampling` turns those flags into the `SamplingSettings`
decoding uses (attnseq/decoding/sampling.py). Further checkpoints among the arguments (ending in
.pt) make an ensemble (`split_checkpoints`, attnseq/models/ensemble.py).
"""

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnseq.errors import UserError

if TYPE_CHECKING:
    from attnseq.decoding.settings import SamplingSettings

OverridesArgument = Annotated[
    list[str] | None,
    typer.Argument(
        help="Overrides of the checkpoint's config, key=value (e.g. trainer.beam=3); the "
        "decoding options (--beam, --length-penalty, ...) win over them. More checkpoints "
        "(B.pt C.pt ...) decode with the first as an ensemble."
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

SampleOption = Annotated[
    bool,
    typer.Option(
        "--sample",
        help="Draw every output token at random from the model's distribution (shaped by "
        "--temperature, --top-k, --top-p) instead of searching; not with --beam > 1.",
    ),
]
TemperatureOption = Annotated[
    float | None,
    typer.Option(help="Sampling temperature T >= 1e-6: softmax(logits / T) (default 1)."),
]
TopKOption = Annotated[
    int | None,
    typer.Option(help="Sample among the k most probable tokens only, 0 = all (default 0)."),
]
TopPOption = Annotated[
    float | None,
    typer.Option(
        help="Nucleus sampling: among the fewest most probable tokens whose probability "
        "reaches p, in (0, 1] (Holtzman et al. 2020; default 1 = all)."
    ),
]
NumSamplesOption = Annotated[
    int | None, typer.Option(help="Samples drawn per input (translate; default 1).")
]
SeedOption = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=2**64 - 1,  # the range of torch's generator seeds
        help="Seed of the sampling draws: the same seed, input and device give the "
        "same samples (default 0).",
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
    sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    num_samples: int | None = None
    seed: int | None = None

    def overrides(self, overrides: list[str] | None) -> list[str]:
        """`overrides` followed by the options given, as `trainer.*` overrides, so that the
        flags win. UserError for an argument that is no key=value or would change the
        trained model, or a number option that is not finite."""
        self.check_finite()
        for override in overrides or []:
            _check_override(override)
        given = [
            f"trainer.{_TRAINER_KEYS.get(field.name, field.name)}={getattr(self, field.name)}"
            for field in fields(self)
            if field.name not in _SAMPLING_FLAGS and getattr(self, field.name) is not None
        ]
        return [*(overrides or []), *given]

    def check_finite(self) -> None:
        """UserError for a number option given as inf or nan (the command line reads "inf",
        "nan" and "1e999" as floats): such a value slips past a range check such as T > 0 and
        decodes nonsense, e.g. --temperature inf makes every output empty."""
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                option = "--" + field.name.replace("_", "-")
                raise UserError(f"{option} must be a finite number, got {value}")

    def sampling(self) -> "SamplingSettings | None":
        """The sampling settings of --sample and its options; None without --sample.
        UserError for a sampling option without --sample, --sample with --beam > 1, or a
        value out of range."""
        from attnseq.decoding.settings import SamplingSettings

        self.check_finite()
        given = {name: getattr(self, name) for name in _SAMPLING_FLAGS[1:]}
        given = {name: value for name, value in given.items() if value is not None}
        if not self.sample:
            if given:
                flags = ", ".join(f"--{name.replace('_', '-')}" for name in given)
                raise UserError(f"{flags}: sampling options, they go with --sample")
            return None
        if self.beam is not None and self.beam != 1:
            raise UserError(
                f"--sample draws the outputs and --beam {self.beam} searches for them: "
                "give one of them (--num-samples N draws N outputs per input)"
            )
        settings = SamplingSettings(**given)
        problems = settings.problems()
        if problems:
            raise UserError(f"invalid sampling options: {'; '.join(problems)}")
        return settings


# the command line's default: every decoding setting as the checkpoint has it
CHECKPOINT_SETTINGS = DecodingFlags()

# the option type of each field of DecodingFlags
_OPTIONS = {
    "beam": BeamOption,
    "length_penalty": LengthPenaltyOption,
    "min_length": MinLengthOption,
    "no_repeat_ngram": NoRepeatNgramOption,
    "coverage_penalty": CoveragePenaltyOption,
    "sample": SampleOption,
    "temperature": TemperatureOption,
    "top_k": TopKOption,
    "top_p": TopPOption,
    "num_samples": NumSamplesOption,
    "seed": SeedOption,
}
# the fields of DecodingFlags that are sampling options, not trainer.* keys
_SAMPLING_FLAGS = ("sample", "temperature", "top_k", "top_p", "num_samples", "seed")


def with_decoding_flags(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with the decoding options (--beam, --length-penalty, --min-length,
    --no-repeat-ngram, --coverage-penalty, and --sample with its options) in its signature
    where its `decoding` parameter stands; Typer reads that signature, and `command` gets the
    values as `decoding`."""
    signature = inspect.signature(command)
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "decoding":
            parameters.append(parameter)
            continue
        parameters += [
            inspect.Parameter(
                name, parameter.kind, default=False if name == "sample" else None, annotation=option
            )
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


def split_checkpoints(arguments: list[str] | None) -> tuple[list[Path], list[str]]:
    """(more checkpoints, overrides) of the arguments after the first checkpoint: an argument
    without "=" that ends in .pt is a checkpoint (an ensemble member), the rest overrides."""
    more, overrides = [], []
    for argument in arguments or []:
        is_checkpoint = "=" not in argument and argument.endswith(".pt")
        (more if is_checkpoint else overrides).append(Path(argument) if is_checkpoint else argument)
    return more, overrides  # type: ignore[return-value]
