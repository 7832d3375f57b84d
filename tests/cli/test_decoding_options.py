"""The seams of the command line: the decoding options shared by `eval` and `translate`, the
number options that must be finite, and the torchrun check that must not load torch outside
torchrun."""

import inspect
from pathlib import Path

import pytest
from helpers import untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.cli.decoding_options import (
    CHECKPOINT_SETTINGS,
    DecodingFlags,
    split_checkpoints,
    with_decoding_flags,
)
from attnseq.cli.hydra_entry import torchrun_world
from attnseq.decoding.settings import SamplingSettings
from attnseq.errors import UserError


def test_decoding_flags_come_after_the_overrides_so_that_they_win() -> None:
    flags = DecodingFlags(beam=5, min_length=3)
    assert flags.overrides(["trainer.beam=2"]) == [
        "trainer.beam=2",
        "trainer.beam=5",
        "trainer.min_output_length=3",
    ]
    assert CHECKPOINT_SETTINGS.overrides(None) == []


@pytest.mark.parametrize(
    ("override", "message"), [("hello", "key=value"), ("model.hidden=8", "model.")]
)
def test_decoding_overrides_refuse_text_and_model_keys(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        CHECKPOINT_SETTINGS.overrides([override])


def test_with_decoding_flags_puts_the_options_where_decoding_stands() -> None:
    received = []

    @with_decoding_flags
    def command(
        checkpoint: str, decoding: DecodingFlags = CHECKPOINT_SETTINGS, device: str = "auto"
    ) -> None:
        received.append((checkpoint, decoding, device))

    names = list(inspect.signature(command).parameters)
    assert names == [
        "checkpoint",
        "beam",
        "length_penalty",
        "min_length",
        "no_repeat_ngram",
        "coverage_penalty",
        "sample",
        "temperature",
        "top_k",
        "top_p",
        "num_samples",
        "seed",
        "device",
    ]
    assert inspect.signature(command).parameters["sample"].default is False
    command(
        checkpoint="a.pt",
        beam=4,
        length_penalty=None,
        min_length=None,
        no_repeat_ngram=3,
        coverage_penalty=None,
        sample=False,
        temperature=None,
        top_k=None,
        top_p=None,
        num_samples=None,
        seed=None,
        device="cpu",
    )
    assert received == [("a.pt", DecodingFlags(beam=4, no_repeat_ngram=3), "cpu")]


def test_sampling_flags_are_no_trainer_overrides() -> None:
    flags = DecodingFlags(sample=True, temperature=0.5, top_p=0.9, seed=3)
    assert flags.overrides(None) == []
    sampling = flags.sampling()
    assert sampling is not None
    assert (sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed) == (
        0.5,
        0,
        0.9,
        3,
    )
    assert DecodingFlags(beam=1, sample=True).sampling() is not None  # --beam 1 is no search
    assert CHECKPOINT_SETTINGS.sampling() is None


def test_arguments_ending_in_pt_are_more_checkpoints() -> None:
    more, overrides = split_checkpoints(["b.pt", "trainer.beam=2", "runs/c.pt", "~data.x"])
    assert [str(path) for path in more] == ["b.pt", "runs/c.pt"]
    assert overrides == ["trainer.beam=2", "~data.x"]
    assert split_checkpoints(None) == ([], [])
    assert split_checkpoints(["input.txt"]) == ([], ["input.txt"])  # refused as an override


def test_no_torchrun_world_without_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert torchrun_world() is None


NOT_FINITE = ["inf", "-inf", "nan", "1e999"]  # 1e999 reads as inf


@pytest.mark.parametrize("value", NOT_FINITE)
@pytest.mark.parametrize("option", ["length_penalty", "coverage_penalty", "temperature", "top_p"])
def test_decoding_flags_refuse_numbers_that_are_not_finite(option: str, value: str) -> None:
    sample = option in ("temperature", "top_p")
    flags = DecodingFlags(sample=sample, **{option: float(value)})
    flag = "--" + option.replace("_", "-")
    for method in (flags.sampling, lambda: flags.overrides(None)):
        with pytest.raises(UserError, match=f"^{flag} must be a finite number, got"):
            method()


def test_sampling_settings_refuse_an_infinite_temperature() -> None:
    assert SamplingSettings(temperature=float("inf")).problems() == [
        "temperature must be >= 1e-06 and finite, got inf"
    ]
    assert SamplingSettings(temperature=0.5).problems() == []


runner = CliRunner()


@pytest.fixture(scope="module")
def transformer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_checkpoint(
        tmp_path_factory.mktemp("ckpt") / "model.pt", "model.family=transformer"
    )


def one_line_exit_2(result, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", NOT_FINITE)
def test_every_float_option_of_the_command_line_refuses_what_is_not_finite(
    transformer: Path, tmp_path: Path, value: str
) -> None:
    """Each command's number options, given inf or nan, end in one line before any work."""
    ck = str(transformer)
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
