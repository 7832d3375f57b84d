"""`--version` and shell completion, through the protocols a shell uses (environment
variables in, candidates out), in subprocesses; one test drives the bash script itself."""

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

# `attnseq` as the console script names itself (completion scripts are written for that name)
RUN_AS_ATTNSEQ = "import sys; sys.argv[0] = 'attnseq'; from attnseq.cli.app import main; main()"


def attnseq(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The CLI in a subprocess. `--show-completion SHELL` takes the shell named: Typer's own
    switch for tests, since without it the shell is guessed from the parent processes, which a
    detached test run (no shell among them) does not have."""
    if "--show-completion" in args:
        env = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", **env}
    return subprocess.run(
        [sys.executable, "-c", RUN_AS_ATTNSEQ, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def complete_bash(line: str, **env: str) -> list[str]:
    """Candidates for the last word of `line` (split on blanks, as bash's COMP_WORDS)."""
    words = line.split(" ")
    result = attnseq(
        _ATTNSEQ_COMPLETE="complete_bash",
        COMP_WORDS=" ".join(words),
        COMP_CWORD=str(len(words) - 1),
        **env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.slow
def test_version_names_attnseq_torch_hydra_and_python() -> None:
    result = attnseq("--version")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"attnseq {metadata.version('attnseq')}"
    assert lines[1] == f"torch {metadata.version('torch')}"
    assert lines[2] == f"hydra-core {metadata.version('hydra-core')}"
    assert lines[3].startswith("python 3.")
    # Hydra's own --version would print only "Hydra 1.3.x": train gives attnseq's
    assert attnseq("train", "--version").stdout == result.stdout


@pytest.mark.slow
def test_command_names_and_options_complete() -> None:
    assert complete_bash("attnseq tr") == ["train", "translate"]
    assert "doctor" in complete_bash("attnseq ")
    assert complete_bash("attnseq eval --be") == ["--beam"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("attnseq train model.hid", ["model.hidden="]),
        ("attnseq train trainer.max_st", ["trainer.max_steps="]),
        ("attnseq train data=reverse model=tr", ["model=transformer"]),
        # bash splits `model=tr` at "=" (COMP_WORDBREAKS): it replaces what follows the "="
        ("attnseq train model =", ["rnn_bahdanau", "rnn_luong", "rnn_none", "transformer"]),
        ("attnseq train model = tr", ["transformer"]),
        ("attnseq train config=reverse_t", ["config=reverse_transformer"]),
    ],
)
def test_train_completes_hydra_overrides(line: str, expected: list[str]) -> None:
    assert complete_bash(line) == expected


@pytest.mark.slow
def test_hydra_shell_completion_flow_goes_through_train() -> None:
    script = attnseq("--show-completion", "bash")
    assert script.returncode == 0
    assert "complete -o default -F _attnseq_completion attnseq" in script.stdout
    assert "compopt -o nospace" in script.stdout
    assert attnseq("train", "-sc", "install=bash").stdout == script.stdout
    # Hydra's own hint (`--hydra-help`) says `attnseq -sc install=bash`
    assert attnseq("-sc", "install=bash").stdout == script.stdout
    query = attnseq("train", "-sc", "query=bash", COMP_LINE="attnseq train optim.lr")
    assert query.returncode == 0 and query.stdout.split() == ["optim.lr="]
    wrong = attnseq("train", "-sc", "frobnicate")
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: -sc frobnicate")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_script_completes_a_hydra_key() -> None:
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "attnseq").exists():
        pytest.skip("the attnseq console script is not installed beside this python")
    script = attnseq("--show-completion", "bash").stdout
    driver = (
        script + "\nCOMP_WORDS=(attnseq train model.hid); COMP_CWORD=2\n"
        '_attnseq_completion attnseq 2>/dev/null; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", driver],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path},
    )
    assert result.stdout.split() == ["model.hidden="], result.stderr


@pytest.mark.slow
def test_train_help_with_a_bad_override_is_a_user_error() -> None:
    result = attnseq("train", "--help", "model=nope")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown choice model=nope. Valid: rnn_bahdanau")
