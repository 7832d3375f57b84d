"""Which runs a sweep folder holds: a run is identified by what it trained (its configuration and
seed), not by its path, so a copy does not count as another seed; compare and sweep-report agree
on a finished run without checkpoints/best.pt (refused) and an unfinished one (left out, said);
a folder given beside a system is searched a few levels down, not to the bottom."""

import shutil
from pathlib import Path

import pytest
from helpers import sweep_job
from typer.testing import CliRunner

import attnseq.analysis.seed_groups as seed_groups
from attnseq.analysis.seed_groups import plan_groups
from attnseq.cli.app import app
from attnseq.errors import UserError

runner = CliRunner()


def test_a_copy_of_a_run_is_not_another_seed(rnn_checkpoint: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    first = sweep_job(rnn_checkpoint, sweep / "0", 1)
    sweep_job(rnn_checkpoint, sweep / "1", 2)
    shutil.copytree(first, sweep / "2")  # byte for byte
    with pytest.raises(UserError) as refused:
        plan_groups([sweep])
    message = str(refused.value)
    assert f"{sweep / '2'} and {first} are one run (one configuration, seed 1)" in message
    shutil.rmtree(sweep / "2")
    assert [m.seed for g in plan_groups([sweep]) for m in g.members] == [1, 2]


def test_compare_and_sweep_report_agree_on_runs_without_a_checkpoint(
    rnn_checkpoint: Path, tmp_path: Path
) -> None:
    sweep = tmp_path / "sweep"
    sweep_job(rnn_checkpoint, sweep / "0", 1, lr=0.1)
    sweep_job(rnn_checkpoint, sweep / "1", 1, lr=0.2)
    unfinished = sweep_job(rnn_checkpoint, sweep / "2", 3, finished=False, lr=0.2)
    notes: list[str] = []
    groups = plan_groups([sweep], notes)
    assert [[m.path for m in g.members] for g in groups] == [[sweep / "0"], [sweep / "1"]]
    assert notes == [f"left out, unfinished (no metrics.json): {unfinished}"]
    (sweep / "1" / "checkpoints" / "best.pt").unlink()  # finished, but its checkpoint is gone
    expected = f"{sweep / '1'}: a finished run without checkpoints/best.pt"
    with pytest.raises(UserError, match=expected):
        plan_groups([sweep])
    compared = runner.invoke(app, ["compare", str(sweep)])
    reported = runner.invoke(app, ["sweep-report", str(sweep), "--significance"])
    for result in (compared, reported):
        assert result.exit_code == 2 and expected in result.output, result.output


def test_a_folder_beside_a_system_is_searched_a_few_levels_down(
    rnn_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    deep = tmp_path / "tree" / "1" / "2" / "3" / "4"
    sweep_job(rnn_checkpoint, deep / "run", 1)
    result = runner.invoke(app, ["compare", str(tmp_path / "a.txt"), str(tmp_path / "tree")])
    assert result.exit_code == 2, result.output
    assert "not a system" in result.output and "nor a sweep folder" in result.output
    assert seed_groups.sweep_runs(deep.parent).finished == [deep / "run"]  # 2 levels down
    wide = tmp_path / "wide"
    for number in range(30):
        (wide / str(number) / "x").mkdir(parents=True)
    monkeypatch.setattr(seed_groups, "MAX_SWEEP_FOLDERS", 20)
    with pytest.raises(UserError, match="more than 20 folders"):
        seed_groups.sweep_runs(wide)
