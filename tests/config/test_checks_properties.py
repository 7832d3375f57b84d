"""Property-style check of every numeric config key: random values of every kind (negative,
zero, huge, nan/inf, wrong types) given to `attnseq train` either pass the pre-flight checks
(exit 0) or end with one `error:` line and exit status 2 - never a traceback, never a run
directory. The keys come from walking the schema, so a new key is covered without a change here.

Two levels: through the CLI, a seeded sample of command-line values per key (Hydra composes
each, so this is the slow part); and straight into the checks (`validate`, `resource_problems`),
many values of the field's own type per key, with both model families.

Hydra itself is not started for accepted values (`run_hydra` is replaced by a recorder): what
is checked is everything `attnseq train` does before the run directory exists.
"""

import copy
import dataclasses
import math
import random
import types
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnseq.cli import hydra_entry
from attnseq.cli.app import app
from attnseq.config.checks import validate
from attnseq.config.choices import ModelFamily
from attnseq.config.resources import cpu_cores, resource_problems, total_ram
from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError

# Values of every kind, as the user types them on the command line.
INT_VALUES = ["0", "-1", "1", "2", "-7", "3", "1000000", "2147483648", "9223372036854775808",
              "10000000000000000000000000000000", "-99999999999", "1.5", "abc", "nan", "true",
              "null", "[1,2]", "''"]  # fmt: skip
FLOAT_VALUES = ["0", "0.0", "-0.0", "-1", "1", "0.5", "0.999", "1e-300", "1e300", "nan", "inf",
                "-inf", "-1e-9", "7", "abc", "null", "[0.5]", "1" + "0" * 30]  # fmt: skip
LIST_VALUES = ["[]", "[0.5]", "[0.9,0.999]", "[0.9,0.999,0.5]", "[nan,0.9]", "[0.9,inf]",
               "[-0.1,0.5]", "[1,0.5]", "[abc,0.5]", "0.9", "null", "[[0.9],[0.9]]"]  # fmt: skip
CASES_PER_KEY = 1


def numeric_keys(node: type = TrainConfig, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(dotted key, candidate values) for every int, float and list-of-float field."""
    keys: list[tuple[str, list[str]]] = []
    hints = typing.get_type_hints(node)
    for spec in dataclasses.fields(node):
        kind = hints[spec.name]
        if dataclasses.is_dataclass(kind):
            keys += numeric_keys(kind, f"{prefix}{spec.name}.")
            continue
        args = set(typing.get_args(kind)) - {type(None)}
        base = args.pop() if isinstance(kind, types.UnionType) and len(args) == 1 else kind
        if base is bool:
            continue
        if base is int:
            keys.append((f"{prefix}{spec.name}", INT_VALUES))
        elif base is float:
            keys.append((f"{prefix}{spec.name}", FLOAT_VALUES))
        elif typing.get_origin(base) is list and typing.get_args(base) == (float,):
            keys.append((f"{prefix}{spec.name}", LIST_VALUES))
    return keys


def cases() -> list[tuple[str, str, str]]:
    """A fixed random sample of (model family, key, value): the same every run, so a failure
    repeats. model.* keys are tried with both families (each ignores the other's keys)."""
    rng = random.Random(2024)
    sample = []
    for key, values in numeric_keys():
        for family in (
            ("rnn_bahdanau", "transformer") if key.startswith("model.") else ("rnn_bahdanau",)
        ):
            sample += [(family, key, value) for value in rng.sample(values, CASES_PER_KEY)]
    return sample


def test_the_schema_walk_finds_the_numeric_keys() -> None:
    keys = dict(numeric_keys())
    for key in ("seed", "model.heads", "model.attention.D", "optim.betas", "trainer.max_minutes"):
        assert key in keys
    assert "trainer.progress" not in keys and "data.name" not in keys
    assert len(keys) > 50


@pytest.fixture(scope="module")
def started() -> list[list[str]]:
    """Replaces the start of Hydra's run with a recorder of the arguments it would get."""
    calls: list[list[str]] = []
    original = hydra_entry.run_hydra
    hydra_entry.run_hydra = calls.append  # type: ignore[assignment]
    yield calls
    hydra_entry.run_hydra = original


@pytest.mark.parametrize(("model", "key", "value"), cases())
def test_any_value_passes_or_exits_2_in_one_line(
    model: str, key: str, value: str, started: list[list[str]], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    before = len(started)
    # The model is CPU-only and small, so accepted values exercise the checks, not the machine.
    args = [f"model={model}", "trainer.device=cpu", f"{key}={value}", f"hydra.run.dir={run_dir}"]
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code in (0, 2), (result.output, result.exception)
    assert "Traceback" not in result.output
    # a refused value leaves no run directory; an accepted one may have taken its lock there
    assert result.exit_code == 0 or not run_dir.exists()
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert key in result.output or "does not fit" in result.output
        assert len(started) == before
    else:
        assert result.output == ""
        assert len(started) == before + 1  # accepted: Hydra would start the run now


def typed_values(kind: str, rng: random.Random) -> list:
    """Values of a field's own type: edge cases and random ones of every magnitude."""
    if kind == "list":
        floats = typed_values("float", rng)
        return [[], [0.5], [0.9, 0.999], [0.9, 0.999, 0.5]] + [
            [rng.choice(floats), rng.choice(floats)] for _ in range(10)
        ]
    if kind == "int":
        edges = [0, -1, 1, 2, 3, 7, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30, -(10**30)]
        return edges + [rng.choice([-1, 1]) * 10 ** rng.randint(0, 20) for _ in range(8)]
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 0.999, 1e-300, 1e300, math.nan, math.inf, -math.inf]
    return edges + [rng.uniform(-1, 1) * 10 ** rng.randint(-10, 30) for _ in range(8)]


def test_every_typed_value_is_accepted_or_refused_by_the_checks() -> None:
    rng = random.Random(7)
    ram, cores = total_ram(), cpu_cores()
    checked = refused = 0
    for family in ModelFamily:
        base = TrainConfig()
        base.model.family = family
        for key, candidates in numeric_keys():
            kind = {id(INT_VALUES): "int", id(FLOAT_VALUES): "float"}.get(id(candidates), "list")
            for value in typed_values(kind, rng):
                cfg = copy.deepcopy(base)
                *parents, leaf = key.split(".")
                node = cfg
                for name in parents:
                    node = getattr(node, name)
                setattr(node, leaf, value)
                checked += 1
                try:
                    validate(cfg)
                except UserError as error:
                    refused += 1
                    assert "\n" not in str(error)  # one value wrong: one line
                    continue
                # accepted: the machine check also ends in a message or passes
                for gpu in (None, 80 * 1024**3):
                    assert isinstance(resource_problems(cfg, ram, gpu, cores), list)
    assert checked > 2000 and 0 < refused < checked
