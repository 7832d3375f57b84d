"""The front door answers without the heavy libraries: `attnseq --help`, `--version`, every
command's `--help` and shell completion run in a fresh interpreter that must not load torch,
datasets, matplotlib, sacrebleu or tensorboard (speed is measured by scripts, not here)."""

import json
import subprocess
import sys

import pytest

from attnseq.cli.app import app

HEAVY = ("torch", "datasets", "matplotlib", "sacrebleu", "tensorboard", "pandas")

# runs the CLI as `python -m attnseq ARGS` would, then reports which heavy modules it loaded
SNIPPET = """
import json, runpy, sys
heavy_names = json.loads(sys.argv[2])
sys.argv = ["attnseq", *json.loads(sys.argv[1])]
try:
    runpy.run_module("attnseq", run_name="__main__")
except SystemExit as stop:
    code = stop.code
else:
    code = 0
heavy = [name for name in heavy_names if name in sys.modules]
print("\\nLOADED " + json.dumps({"code": code, "heavy": heavy}))
"""

COMMANDS = sorted(command.name or command.callback.__name__ for command in app.registered_commands)


def run_cli(args: list[str], env: dict[str, str] | None = None) -> tuple[dict, str]:
    result = subprocess.run(
        [sys.executable, "-c", SNIPPET, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert "LOADED " in result.stdout, result.stderr
    marker = result.stdout.rindex("LOADED ")
    return json.loads(result.stdout[marker + len("LOADED ") :]), result.stdout[:marker]


def test_every_command_is_checked() -> None:
    assert {"train", "eval", "translate", "doctor"} <= set(COMMANDS)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], *[[command, "--help"] for command in COMMANDS]],
    ids=lambda args: " ".join(args),
)
def test_front_door_leaves_heavy_libraries_unloaded(args: list[str]) -> None:
    report, output = run_cli(args)
    assert report["code"] in (0, None), output
    assert "Usage" in output or "attnseq" in output
    assert report["heavy"] == [], f"attnseq {' '.join(args)} imported {report['heavy']}"


@pytest.mark.slow
def test_completion_leaves_heavy_libraries_unloaded() -> None:
    import os

    env = {**os.environ, "_ATTNSEQ_COMPLETE": "complete_bash", "COMP_CWORD": "2"}
    env["COMP_WORDS"] = "attnseq train model.hid"
    report, output = run_cli([], env)
    assert output.split() == ["model.hidden="]
    assert report["heavy"] == []


@pytest.mark.slow
def test_train_help_is_hydras_application_help() -> None:
    """attnseq's own rendering of `train --help` prints what Hydra's `--help` prints, its
    config groups wrapped to the terminal (80 columns here, without one)."""
    args = ["--help", "model=transformer", "optim.lr=0.5"]
    report, ours = run_cli(["train", *args])
    assert report["code"] in (0, None) and report["heavy"] == []
    hydra_help = (
        "import sys; from attnseq.cli.hydra_entry import run_hydra; run_hydra(sys.argv[1:])"
    )
    hydras = subprocess.run(
        [sys.executable, "-c", hydra_help, *args], capture_output=True, text=True, timeout=120
    )
    assert hydras.returncode == 0, hydras.stderr
    assert ours.split() == hydras.stdout.split()  # the same words; ours wrapped
    assert "== Configuration groups ==" in ours and "family: transformer" in ours
    assert "lr: 0.5" in ours
