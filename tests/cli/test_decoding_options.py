"""The seams of the command line: the decoding options shared by `eval` and `translate`, the
number options that must be finite, and the torchrun check that must not load torch outside
torchrun."""

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from helpers import one_line_exit_2
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.cli.decoding_options import (
    CHECKPOINT_SETTINGS,
    SETTINGS,
    DecodingFlags,
    checked_overrides,
    split_checkpoints,
    with_decoding_flags,
)
from attnseq.config.schema import DecodingConfig
from attnseq.decoding.settings import with_changes
from attnseq.errors import UserError


def test_the_flags_given_are_typed_changes_of_the_checkpoints_settings() -> None:
    flags = DecodingFlags(beam=5, min_length=3, length_penalty=None, sample=False)
    assert flags.changes() == {"beam": 5, "min_length": 3}
    checkpoint = DecodingConfig(beam=2, length_penalty=0.6, no_repeat_ngram=3)
    changed = with_changes(checkpoint, flags.changes())
    assert changed == DecodingConfig(beam=5, length_penalty=0.6, no_repeat_ngram=3, min_length=3)
    assert checkpoint.beam == 2  # a replacement: the checkpoint's settings stay
    assert CHECKPOINT_SETTINGS.changes() == {}


def test_sample_draws_with_beam_and_nbest_one_and_a_search_flag_searches() -> None:
    summarizer = DecodingConfig(beam=4, nbest=2, min_length=8)
    sampled = with_changes(summarizer, DecodingFlags(sample=True, top_p=0.9).changes())
    assert (sampled.sample, sampled.beam, sampled.nbest, sampled.top_p) == (True, 1, 1, 0.9)
    assert sampled.min_length == 8  # the constraints still hold
    searched = with_changes(sampled, DecodingFlags(beam=3).changes())
    assert (searched.sample, searched.beam, searched.nbest) == (False, 3, 1)


@pytest.mark.parametrize(
    ("override", "message"), [("hello", "key=value"), ("model.hidden=8", "model.")]
)
def test_decoding_overrides_refuse_text_and_model_keys(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        checked_overrides([override])
    assert checked_overrides(["decoding.beam=2", "~data.x"]) == ["decoding.beam=2", "~data.x"]


def test_with_decoding_flags_puts_the_options_where_decoding_stands() -> None:
    received = []

    @with_decoding_flags
    def command(
        checkpoint: str, decoding: DecodingFlags = CHECKPOINT_SETTINGS, device: str = "auto"
    ) -> None:
        received.append((checkpoint, decoding, device))

    names = list(inspect.signature(command).parameters)
    fields = [spec.name for spec in dataclasses.fields(DecodingConfig)]
    assert names == ["checkpoint", *fields, "device"] and list(SETTINGS) == fields
    assert inspect.signature(command).parameters["sample"].default is False
    options = {name: None for name in fields}
    options.update(beam=4, no_repeat_ngram=3, sample=False)
    command(checkpoint="a.pt", **options, device="cpu")
    assert received == [("a.pt", DecodingFlags(beam=4, no_repeat_ngram=3), "cpu")]


def test_every_decoding_setting_is_an_option_named_as_its_key() -> None:
    result = CliRunner().invoke(app, ["translate", "--help"], terminal_width=200)
    text = " ".join(result.output.split())
    for spec in dataclasses.fields(DecodingConfig):
        assert "--" + spec.name.replace("_", "-") in text
        assert f"(default: the checkpoint's decoding.{spec.name})" in text


def test_sampling_flags_go_with_sample() -> None:
    flags = DecodingFlags(sample=True, temperature=0.5, top_p=0.9, seed=3)
    assert flags.changes() == {"sample": True, "temperature": 0.5, "top_p": 0.9, "seed": 3}
    assert DecodingFlags(beam=1, sample=True).changes() == {"beam": 1, "sample": True}
    with pytest.raises(UserError, match="^--top-p, --seed: sampling options, they go with"):
        DecodingFlags(top_p=0.9, seed=3).changes()
    with pytest.raises(UserError, match="^--sample draws the outputs and --beam 2 searches"):
        DecodingFlags(sample=True, beam=2).changes()


def test_arguments_ending_in_pt_are_more_checkpoints() -> None:
    more, overrides = split_checkpoints(["b.pt", "decoding.beam=2", "runs/c.pt", "~data.x"])
    assert [str(path) for path in more] == ["b.pt", "runs/c.pt"]
    assert overrides == ["decoding.beam=2", "~data.x"]
    assert split_checkpoints(None) == ([], [])
    assert split_checkpoints(["input.txt"]) == ([], ["input.txt"])  # refused as an override


NOT_FINITE = ["inf", "-inf", "nan", "1e999"]  # 1e999 reads as inf


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("option", ["length_penalty", "coverage_penalty", "temperature", "top_p"])
def test_decoding_flags_refuse_numbers_that_are_not_finite(option: str, value: str) -> None:
    sample = option in ("temperature", "top_p")
    flags = DecodingFlags(sample=sample, **{option: float(value)})
    flag = "--" + option.replace("_", "-")
    with pytest.raises(UserError, match=f"^{flag} must be a finite number .*, got"):
        flags.changes()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"beam": 0}, "--beam must be >= 1, got 0"),
        ({"length_penalty": 11.0}, "--length-penalty must be >= 0 and <= 10, got 11.0"),
        ({"sample": True, "temperature": 1e-7}, "--temperature must be >= 1e-06, got 1e-07"),
        ({"sample": True, "seed": 2**64}, "--seed must be >= 0 and <= 18446744073709551615"),
    ],
)
def test_decoding_flags_take_the_bounds_of_their_settings(options: dict, message: str) -> None:
    with pytest.raises(UserError, match=f"^{re.escape(message)}"):
        DecodingFlags(**options).changes()
    assert DecodingFlags(sample=True, seed=2**64 - 1).changes()["seed"] == 2**64 - 1


runner = CliRunner()


@pytest.mark.parametrize("value", NOT_FINITE)
def test_every_float_option_of_the_command_line_refuses_what_is_not_finite(
    transformer_checkpoint: Path, tmp_path: Path, value: str
) -> None:
    """Each command's number options, given inf or nan, end in one line before any work."""
    ck = str(transformer_checkpoint)
    figure = str(tmp_path / "a.png")
    cases = [
        (["translate", ck, "--sample", "--temperature", value], "--temperature must be a finite"),
        (["translate", ck, "--sample", "--top-p", value], "--top-p must be a finite"),
        (["translate", ck, "--length-penalty", value], "--length-penalty must be a finite"),
        (["eval", ck, "--coverage-penalty", value], "--coverage-penalty must be a finite"),
        (["eval", ck, "--sample", "--temperature", value], "--temperature must be a finite"),
        (
            ["visualize-alignment", ck, "--src", "a", "--fontsize", value, "--out", figure],
            "--fontsize must be between 1 and 72",
        ),
        (
            ["visualize-alignment", ck, "--src", "a", "--figsize", f"{value},5", "--out", figure],
            "--figsize must be W,H",
        ),
        (
            ["heads", ck, "--prune", value, "--out", str(tmp_path / "pruned.pt")],
            "--prune fraction must be in (0, 1)",
        ),
    ]
    for args, expected in cases:
        one_line_exit_2(runner.invoke(app, [*args, "--device", "cpu"], input="a\n"), expected)
    assert list(tmp_path.iterdir()) == []
