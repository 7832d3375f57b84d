"""The checks of `attnseq train` before Hydra writes anything (attnseq/cli/preflight.py): its flags,
and every value of a sweep."""

from pathlib import Path

import pytest
from helpers import attnseq_in_process


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


@pytest.mark.slow
def test_interval_sweeps_are_checked_before_the_sweeper_starts() -> None:
    """An Optuna search space is checked at its interval ends: a misspelt key or a value of the
    wrong type is a clear error before any trial runs."""
    from helpers import check_train_args

    from attnseq.cli.preflight import sweep_variants
    from attnseq.errors import UserError

    variants = sweep_variants(["model.hidden=int(interval(16,64))", "seed=1,2"])
    assert ["model.hidden=64", "seed=1"] in variants and ["model.hidden=16", "seed=2"] in variants
    check_train_args(["-m", "optim.lr=tag(log, interval(1e-4, 1e-2))"])
    with pytest.raises(UserError, match="Did you mean 'optim.lr'"):
        check_train_args(["-m", "optim.lrr=interval(0.0001, 0.01)"])
    with pytest.raises(UserError, match="model.dropout"):
        check_train_args(["-m", "model.dropout=interval(0.0, 1.5)"])
