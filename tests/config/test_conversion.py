"""A checkpoint written before the decoding settings were keys of their own (`trainer.beam`,
`trainer.min_output_length`, ...) keeps loading: `config_from_dict` moves its keys into
`decoding.*`, and the model decodes exactly as from the same checkpoint in today's layout."""

from pathlib import Path

import pytest
from helpers import untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config.conversion import MOVED_KEYS, config_from_dict, config_to_dict, upgraded
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models.loading import load_trained_model

SETTINGS = {
    "beam": 3,
    "length_penalty": 0.6,
    "max_output_ratio": 0.5,
    "max_output_extra": 4,
    "min_length": 2,
    "no_repeat_ngram": 2,
    "coverage_penalty": 0.2,
}
OLD_NAMES = {"min_length": "min_output_length"}  # the one setting that had another name


def old_layout(config: dict) -> dict:
    """`config` as checkpoints stored it before `decoding.*`: the search settings among the
    trainer's keys, no decoding node (and so no n-best or sampling keys)."""
    old = {**config, "trainer": dict(config["trainer"])}
    decoding = old.pop("decoding")
    for key in SETTINGS:
        old["trainer"][OLD_NAMES.get(key, key)] = decoding[key]
    return old


@pytest.fixture(scope="module")
def old_and_new_layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("layouts")
    overrides = [f"decoding.{key}={value}" for key, value in SETTINGS.items()]
    new = untrained_checkpoint(folder / "new.pt", *overrides)
    payload = load_checkpoint(new)
    payload["config"] = old_layout(payload["config"])
    save_checkpoint(folder / "old.pt", payload)
    return {"new": new, "old": folder / "old.pt"}


def test_an_old_checkpoint_loads_with_its_decoding_settings(
    old_and_new_layouts: dict[str, Path],
) -> None:
    stored = load_checkpoint(old_and_new_layouts["old"])["config"]
    assert "decoding" not in stored and stored["trainer"]["min_output_length"] == 2
    old = load_trained_model(old_and_new_layouts["old"]).cfg
    new = load_trained_model(old_and_new_layouts["new"]).cfg
    assert old == new
    assert old.decoding.beam == 3 and old.decoding.min_length == 2
    assert old.decoding.coverage_penalty == 0.2 and old.decoding.max_output_extra == 4
    assert not hasattr(old.trainer, "beam")


def test_an_old_checkpoint_decodes_as_the_new_one(old_and_new_layouts: dict[str, Path]) -> None:
    runner = CliRunner()
    text = "4 May 2001\nJune 5, 2001\n"
    outputs = []
    for name in ("old", "new"):
        args = ["translate", str(old_and_new_layouts[name]), "--nbest", "3", "--device", "cpu"]
        result = runner.invoke(app, args, input=text)
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 6  # the beam of 3


def test_the_rule_moves_each_old_key_and_leaves_the_dict_alone() -> None:
    old = {"trainer": {"beam": 4, "min_output_length": 8, "max_steps": 5}, "seed": 2}
    assert upgraded(old) == {
        "trainer": {"max_steps": 5},
        "seed": 2,
        "decoding": {"beam": 4, "min_length": 8},
    }
    assert old["trainer"] == {"beam": 4, "min_output_length": 8, "max_steps": 5}
    today = config_to_dict(config_from_dict({}, ["decoding.beam=2"]))
    assert upgraded(today) == today  # today's layout passes unchanged
    assert set(MOVED_KEYS) == {f"trainer.{OLD_NAMES.get(key, key)}" for key in SETTINGS}


def test_an_old_key_as_an_override_names_its_new_place() -> None:
    with pytest.raises(UserError, match=r"trainer\.beam: .*; it is decoding\.beam now"):
        config_from_dict({}, ["trainer.beam=3"])
