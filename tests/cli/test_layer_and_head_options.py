"""--layer and --head count from 1 on every command that takes them, and a value out of the
model's range exits 2 with the valid range, on every model family."""

from pathlib import Path

import pytest
from helpers import untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app

# family -> (overrides of the tiny config, decoder layers, heads of the map the options pick)
FAMILIES = {
    "rnn bahdanau": (("model.family=rnn", "model.decoder=bahdanau"), 1, 1),
    "rnn luong": (("model.family=rnn", "model.decoder=luong"), 1, 1),
    "rnn pointer": (("model.family=rnn", "model.copy=true"), 1, 1),
    "rnn hard": (("model.family=rnn", "model.attention.hard=gumbel"), 1, 1),
    "rnn hierarchical": (("model.family=rnn", "model.attention.hierarchy=sentence"), 1, 1),
    "transformer": (("model.family=transformer", "model.dec_layers=2"), 2, 2),
    "transformer pointer": (("model.family=transformer", "model.copy=true"), 1, 2),
    "transformer hard": (("model.family=transformer", "model.attention.hard=gumbel"), 1, 2),
    "transformer local": (("model.family=transformer", "model.attention.kind=local"), 1, 2),
}
SOURCE, TARGET = "June 5, 2001", "2001-06-05"  # a generated dates pair


@pytest.fixture(scope="module")
def variant_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("families")
    return {
        family: untrained_checkpoint(folder / f"{number}.pt", *overrides)
        for number, (family, (overrides, _, _)) in enumerate(FAMILIES.items())
    }


def command(name: str, checkpoint: Path, folder: Path) -> list[str]:
    src, tgt = folder / "src.txt", folder / "tgt.txt"
    src.write_text(SOURCE + "\n", encoding="utf-8")
    tgt.write_text(TARGET + "\n", encoding="utf-8")
    if name == "align":
        return ["align", str(checkpoint), "--src", str(src), "--tgt", str(tgt)]
    return ["visualize-alignment", str(checkpoint), "--src", SOURCE, "--out", str(folder / "a.png")]


# The default run covers an RNN with a copy mechanism (whose maps come from another module) and
# a plain transformer; `-m slow` every family.
BY_DEFAULT = ("rnn pointer", "transformer")


@pytest.mark.parametrize("name", ["visualize-alignment", "align"])
@pytest.mark.parametrize(
    "family",
    [
        pytest.param(family, marks=() if family in BY_DEFAULT else pytest.mark.slow)
        for family in FAMILIES
    ],
)
def test_out_of_range_exits_2_with_the_valid_range(
    family: str, name: str, variant_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    _, layers, heads = FAMILIES[family]
    base = command(name, variant_checkpoints[family], tmp_path)
    for option, value, count in (
        ("--layer", layers + 1, layers),
        ("--layer", 0, layers),
        ("--head", heads + 1, heads),
        ("--head", 0, heads),
    ):
        result = CliRunner().invoke(app, [*base, option, str(value)])
        assert result.exit_code == 2, (option, value, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        assert f"{option} must be in 1..{count}" in lines[0], result.output
    # the last layer and head of the range are accepted
    result = CliRunner().invoke(app, [*base, "--layer", str(layers), "--head", str(heads)])
    assert result.exit_code == 0, result.output
