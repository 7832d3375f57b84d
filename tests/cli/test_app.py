"""The command line as a user meets it: help texts, clear errors with exit status 2, a real
`attnseq train` through hydra.main, `attnseq eval` of its checkpoint, and a multirun sweep.
The trainings run in subprocesses through the console entry point (as lightning-hydra-template
does, so Hydra's global state stays isolated); the refusals and `--cfg` run in this process."""

import json
import os
from pathlib import Path

import helpers
import pytest
import yaml
from helpers import attnseq, attnseq_in_process
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.evaluation.metrics import bleu_signature

TINY = [*helpers.TINY, "trainer.max_steps=4", "trainer.validate_every=2"]


def test_help_lists_commands_with_examples() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for word in ["train", "eval", "Examples"]:
        assert word in result.output
    result = CliRunner().invoke(app, ["eval", "--help"])
    assert result.exit_code == 0 and "--split" in result.output


COMMANDS = ["train", "doctor", "eval", "translate", "score", "average", "export"]
COMMANDS += ["visualize-alignment", "align", "explain", "heads", "sweep-report", "compare"]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_whole_at_80_columns(command) -> None:
    """`attnseq --help` and every command's `--help` at COLUMNS=80: no line is cut short
    ("…", or Click's "..." after a command's summary) and none is wider than the terminal."""
    from attnseq.cli.app import app as the_app

    assert [c.name or c.callback.__name__ for c in the_app.registered_commands] == COMMANDS
    args = [command, "--help"] if command else ["--help"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) > 5
    for line in lines:
        assert "…" not in line and len(line) <= 80, line
    if "Commands:" in lines:  # Click ends a summary it had to cut with "..."
        summaries = lines[lines.index("Commands:") + 1 :]
        assert not [line for line in summaries if line.endswith("...")], summaries
    if command == "eval":  # option help has room: a default names its key whole
        text = " ".join(result.output.split())
        assert "(default: the checkpoint's decoding.length_penalty)." in text
        # --split takes any split of the data and data files, and says so
        assert "train, valid, test or another name of its data.splits" in text
        assert "a data file (.jsonl, .tsv or the prefix of a parallel pair" in text


def test_eval_of_a_missing_checkpoint_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "missing.pt")])
    assert result.exit_code == 2
    assert "checkpoint not found" in result.output


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("model.hiden=3", "Did you mean 'model.hidden'"),
        # a decoding setting where older configs had it: refused, its new key named
        ("trainer.beam=4", "unknown config key 'trainer.beam'. Did you mean 'decoding.beam'?"),
        ("trainer.min_output_length=4", "Did you mean 'decoding.min_length'?"),
        ("data=nope", "unknown choice data=nope"),
        ("model.rnn.cell=foo", "expected one of"),
        ("model.d_model=30", None),
        # an interpolation of the wrong type: OmegaConf's message with its values filled in
        ("decoding.beam=${oc.env:HOME}", "Value '" + str(Path.home())),
    ],
)
def test_train_typos_exit_2_without_traceback(
    argument: str, message: str | None, tmp_path: Path
) -> None:
    extra = ["model=transformer"] if argument.startswith("model.d_model") else []
    result = attnseq_in_process("train", argument, *extra, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:")
    if message:
        assert message in result.stderr
    assert "$VALUE" not in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_attention_kind_errors_exit_2(tmp_path: Path) -> None:
    result = attnseq_in_process(
        "train",
        "model=transformer",
        "model.attention.kind=linformer",
        "model.attention.decoder_self=true",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "model.attention.kind=linformer cannot be causal" in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_train_then_eval_reproduces_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = attnseq("train", *TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "run directory" in result.stdout
    assert f"BLEU signature {bleu_signature()}" in result.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (run_dir / "train.log").is_file() and (run_dir / ".hydra" / "config.yaml").is_file()
    result = attnseq(
        "eval",
        str(run_dir / "checkpoints" / "best.pt"),
        "--out",
        str(tmp_path / "eval"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert ["BLEU", "signature", bleu_signature()] in [line.split() for line in lines]
    folder = tmp_path / "eval" / f"best-step{metrics['best_step']}" / "test.greedy"
    assert lines[-1] == f"wrote {folder}/ (hyps.txt, metrics.json, refs.txt)"
    printed = {
        line.split()[0]: float(line.split()[1]) for line in lines if line.split()[0] in metrics
    }
    assert "test/bleu" in printed
    for key, value in printed.items():
        assert value == pytest.approx(metrics[key], abs=1e-4), key


@pytest.mark.slow  # a multirun of trainings in subprocesses
def test_multirun_sweep_runs_each_job(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = attnseq(
        "train", "-m", "data=reverse,copy", *TINY, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    for job in ["0", "1"]:
        assert (sweep_dir / job / "metrics.json").is_file()
    overrides = (sweep_dir / "1" / ".hydra" / "overrides.yaml").read_text()
    assert "data=copy" in overrides


def test_cfg_job_prints_the_composed_config(tmp_path: Path) -> None:
    result = attnseq_in_process(
        "train", "--cfg", "job", "model=rnn_luong", "decoding.beam=4", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "decoder: luong" in result.stdout
    config = yaml.safe_load(result.stdout)
    assert config["decoding"]["beam"] == 4 and config["decoding"]["min_length"] == 0
    assert "beam" not in config["trainer"]


def test_conflicting_hydra_modes_exit_2_without_a_traceback(tmp_path: Path) -> None:
    result = attnseq_in_process("train", "-m", "--cfg", "job", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error:") and "cannot be combined" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--cfg", "nope"], "argument --cfg/-c: invalid choice: 'nope'"),
        (["--info", "seed=3"], "argument --info/-i: invalid choice: 'seed=3'"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_flags_hydra_refuses_are_one_line(flags: list[str], expected: str, tmp_path: Path) -> None:
    """Hydra's parser would print its whole usage text before `attnseq: error: ...`."""
    result = attnseq_in_process("train", *flags, "trainer.max_steps=1", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected}"), result.stderr
    assert "--hydra-help" in lines[0] and not (tmp_path / "outputs").exists()


def test_a_path_that_is_not_utf8_is_printed_as_its_bytes(tmp_path: Path) -> None:
    """argv bytes that are not UTF-8 reach Python as lone surrogates; a strict standard output
    (any UTF-8 locale but C.UTF-8, and typer's test runner) cannot encode them."""
    checkpoint = helpers.untrained_checkpoint(tmp_path / "model.pt")
    out = os.fsdecode(bytes(tmp_path / "averaged-") + b"\xff.pt")
    result = CliRunner().invoke(app, ["average", str(checkpoint), "--out", out])
    assert result.exit_code == 0, result.exception
    assert result.stdout_bytes.endswith(b"averaged-\xff.pt\n")
    assert os.path.isfile(out)


def test_hydra_help_with_overrides_prints_hydra_help(tmp_path: Path) -> None:
    """Hydra composes only its own config for --hydra-help: the overrides of a run would be
    unknown keys there ("unknown config key 'trainer'. Did you mean 'trainer'?")."""
    args = ["train", "--hydra-help", "trainer.max_steps=1", "model=transformer"]
    result = attnseq_in_process(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Hydra (") and "--hydra-help" in result.stdout
    assert not (tmp_path / "outputs").exists()
