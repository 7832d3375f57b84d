"""How `attnseq train` reaches Hydra (attnseq/cli/hydra_entry.py): a multirun through hydra.main,
and torchrun's ranks."""

from pathlib import Path

import pytest
from helpers import TINY, attnseq

from attnseq.cli.hydra_entry import torchrun_world


@pytest.mark.slow  # a multirun of trainings in subprocesses
def test_multirun_sweep_runs_each_job(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = attnseq(
        "train",
        "-m",
        "data=reverse,copy",
        *TINY,
        "trainer.max_steps=4",
        "trainer.validate_every=2",
        f"hydra.sweep.dir={sweep_dir}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    for job in ["0", "1"]:
        assert (sweep_dir / job / "metrics.json").is_file()
    overrides = (sweep_dir / "1" / ".hydra" / "overrides.yaml").read_text()
    assert "data=copy" in overrides


def test_no_torchrun_world_without_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert torchrun_world() is None


def test_other_ranks_keep_hydra_from_writing_and_multirun_is_refused(monkeypatch) -> None:
    from helpers import check_train_args

    from attnseq.cli.hydra_entry import quiet_rank_overrides
    from attnseq.errors import UserError

    args = quiet_rank_overrides(["data=reverse", "hydra.run.dir=runs/x", "hydra/job_logging=none"])
    assert args == [
        "data=reverse",
        "hydra.run.dir=.",
        "hydra.output_subdir=null",
        "hydra/job_logging=stdout",
    ]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")  # torchrun sets both
    with pytest.raises(UserError, match="multirun"):
        check_train_args(["-m", "seed=1,2"])
