"""One run per run directory: `attnseq train` into a directory that holds a run continues it
(resume=auto), replaces it (trainer.overwrite=true) or is refused with one line and exit status 2
before anything in the directory changes, a refused resume leaves the run's record as it was,
and a time-stamped directory that already exists gives the new run a folder of its own."""

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pytest
from helpers import attnseq, tiny_config

from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training import run_directory
from attnseq.training.run_directory import (
    check_run_directory,
    clear_previous_run,
    continues_run,
    run_outputs,
)

TINY = [*helpers.TINY, "trainer.validate_every=2"]
HOLD = (
    "import sys, time; from pathlib import Path; from attnseq.training import run_directory; "
    "run_directory.acquire(Path(sys.argv[1])); print('locked', flush=True); time.sleep(120)"
)


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones included) and the hash of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def refusal(result: subprocess.CompletedProcess) -> str:
    """The one stderr line of a start refused with exit status 2."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step run (with step_2.pt and step_4.pt kept) made by `attnseq train`."""
    root = tmp_path_factory.mktemp("finished")
    run_dir = root / "run"
    args = ["trainer.max_steps=4", "trainer.keep_last=2", f"hydra.run.dir={run_dir}"]
    result = attnseq("train", *TINY, *args, cwd=root)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "checkpoints" / "step_2.pt").is_file()
    return run_dir


@pytest.fixture
def old_run(finished_run: Path, tmp_path: Path) -> Path:
    """A copy of the finished run, byte for byte, in this test's own folder."""
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def test_a_plain_train_into_a_finished_run_is_refused_changing_nothing(
    old_run: Path, tmp_path: Path
) -> None:
    before = tree(old_run)
    result = attnseq(
        "train", *TINY, "trainer.max_steps=4", f"hydra.run.dir={old_run}", cwd=tmp_path
    )
    line = refusal(result)
    assert f"run directory {old_run} already holds a run" in line
    assert "resume=auto" in line and "hydra.run.dir" in line and "trainer.overwrite=true" in line
    assert tree(old_run) == before


def test_resume_auto_continues_the_run_in_the_directory(old_run: Path, tmp_path: Path) -> None:
    args = ["trainer.max_steps=6", "trainer.keep_last=2", "resume=auto", f"hydra.run.dir={old_run}"]
    result = attnseq("train", *TINY, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(old_run / "checkpoints" / "last.pt")["progress"]["step"] == 6
    steps = sorted(path.name for path in (old_run / "checkpoints").glob("step_*.pt"))
    assert steps == ["step_4.pt", "step_6.pt"]  # the run's own retention carries on


def test_overwrite_replaces_the_run_leaving_none_of_its_files(
    old_run: Path, tmp_path: Path
) -> None:
    (old_run / "eval").mkdir()
    (old_run / "eval" / "old.json").write_text("{}")
    (old_run / "notes.txt").write_text("mine")
    (old_run / "hyps" / "valid.txt").write_text("old hypotheses\n")
    (old_run / "metrics.json").write_text('{"from_the_old_run": 1}\n')
    args = ["trainer.max_steps=3", "trainer.keep_last=1", "trainer.overwrite=true"]
    result = attnseq("train", *TINY, *args, f"hydra.run.dir={old_run}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    checkpoints = sorted(path.name for path in (old_run / "checkpoints").iterdir())
    assert checkpoints == ["best.pt", "last.pt", "step_3.pt"]
    assert load_checkpoint(old_run / "checkpoints" / "last.pt")["progress"]["step"] == 3
    assert "from_the_old_run" not in (old_run / "metrics.json").read_text()
    assert sorted(path.name for path in (old_run / "hyps").iterdir()) == ["test.txt"]
    assert not (old_run / "eval").exists() or not any((old_run / "eval").iterdir())
    assert (old_run / "notes.txt").read_text() == "mine"  # not the run's: kept
    assert "trainer.overwrite=true" in (old_run / ".hydra" / "overrides.yaml").read_text()


def test_a_refused_resume_leaves_the_run_record_byte_identical(
    old_run: Path, tmp_path: Path
) -> None:
    before = tree(old_run)
    conflicting = ["model=transformer", "model.d_model=16", "model.heads=2", "resume=auto"]
    result = attnseq("train", *TINY, *conflicting, f"hydra.run.dir={old_run}", cwd=tmp_path)
    line = refusal(result)
    assert "cannot resume from" in line
    assert "model.family: checkpoint 'rnn', now 'transformer'" in line
    assert tree(old_run) == before  # .hydra/config.yaml and overrides.yaml included


def test_a_config_error_exits_2_before_the_run_directory_exists(tmp_path: Path) -> None:
    run_dir = tmp_path / "new"
    result = attnseq("train", *TINY, "model.hiden=3", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert "model.hidden" in refusal(result)
    assert not run_dir.exists()


def test_a_training_in_progress_is_named_rather_than_the_run(old_run: Path, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(old_run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        before = tree(old_run)
        result = attnseq("train", *TINY, f"hydra.run.dir={old_run}", cwd=tmp_path)
    finally:
        process.kill()
        process.wait()
    line = refusal(result)
    assert "is in use" in line and f"pid {process.pid}" in line
    assert tree(old_run) == before


def test_a_rerun_into_a_sweep_folder_is_refused_per_job(old_run: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    old_run.rename(sweep / "1")  # job 1 of the sweep below (seed=2)
    before = tree(sweep)
    args = ["-m", "seed=1,2", f"hydra.sweep.dir={sweep}"]
    line = refusal(attnseq("train", *TINY, *args, cwd=tmp_path))
    assert f"run directory {sweep / '1'} already holds a run" in line
    assert "resume=auto" in line and "hydra.sweep.dir" in line
    assert tree(sweep) == before  # no multirun.yaml, no job 0


def test_a_refused_resume_in_a_sweep_changes_nothing(old_run: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    old_run.rename(sweep / "0")
    before = tree(sweep)
    args = ["-m", "model.hidden=32,16", "resume=auto", f"hydra.sweep.dir={sweep}"]
    line = refusal(attnseq("train", *[a for a in TINY if "hidden" not in a], *args, cwd=tmp_path))
    assert f"cannot resume from {sweep / '0'}" in line  # job 0 (model.hidden=32)
    assert "model.hidden: checkpoint 16, now 32" in line
    assert tree(sweep) == before


def test_under_a_sweeper_choosing_its_jobs_every_job_folder_is_checked(
    old_run: Path, tmp_path: Path
) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    old_run.rename(sweep / "3")
    before = tree(sweep)
    args = ["-m", "hparams_search=reverse_optuna", f"hydra.sweep.dir={sweep}"]
    line = refusal(attnseq("train", *TINY, *args, cwd=tmp_path))
    assert f"run directory {sweep / '3'} already holds a run" in line
    assert tree(sweep) == before


def test_the_resume_command_of_an_overwriting_run_leaves_overwrite_out(tmp_path: Path) -> None:
    """The printed command continues the run: with overwrite it would be refused."""
    code = (
        "import sys, attnseq.training.run as t, attnseq.errors as e\n"
        "def fail(cfg, run_dir): raise e.OutputError('cannot write x: No space left on device')\n"
        "t.run_training = fail\n"
        "from attnseq.cli.app import main\n"
        "sys.argv = ['attnseq', 'train', 'trainer.overwrite=true',\n"
        "            'hydra.run.dir=' + sys.argv[1]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True
    )
    command = refusal(done).split("continue with: ", 1)[1]
    assert command.startswith("attnseq train resume=auto hydra.run.dir=")
    assert "overwrite" not in command


@pytest.mark.slow
def test_a_taken_time_stamped_folder_gives_the_new_run_its_own(
    old_run: Path, tmp_path: Path
) -> None:
    """Two runs in one time stamp (here a year): the second gets DIR_2, the first is kept."""
    year = time.strftime("%Y")
    taken = tmp_path / "out" / year
    taken.parent.mkdir()
    old_run.rename(taken)
    before = tree(taken)
    args = ["trainer.max_steps=2", "hydra.run.dir=out/${now:%Y}"]
    result = attnseq("train", *TINY, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert tree(taken) == before
    assert (tmp_path / "out" / f"{year}_2" / "metrics.json").is_file()


# ------------------------------------------------------------------------ in-process rules
def test_what_counts_as_a_run(tmp_path: Path) -> None:
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "train.log").write_text("failed start\n")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / run_directory.LOCK_NAME).write_text("")
    assert run_outputs(tmp_path) == []  # a start that failed before training: none
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"x")
    (tmp_path / "metrics.json").write_text("{}")
    assert run_outputs(tmp_path) == ["checkpoints", "metrics.json"]


def test_only_resume_of_the_directory_own_checkpoint_continues_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert continues_run("auto", run_dir)
    assert continues_run(str(run_dir / "checkpoints" / "best.pt"), run_dir)
    assert not continues_run(str(tmp_path / "other" / "checkpoints" / "last.pt"), run_dir)
    assert not continues_run(None, run_dir)
    (run_dir / "metrics.json").parent.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match="starts from another run's checkpoint"):
        check_run_directory(run_dir, str(tmp_path / "other" / "checkpoints" / "last.pt"), False)
    check_run_directory(run_dir, None, True)  # overwrite: allowed


def test_clearing_a_run_deletes_its_outputs_only(tmp_path: Path) -> None:
    for name in ["checkpoints/last.pt", "checkpoints/step_3.pt", "tb/events", "hyps/test.txt"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"old")
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("new")
    (tmp_path / "train.log").write_text("log")
    (tmp_path / "notes.txt").write_text("mine")
    assert clear_previous_run(tmp_path) == ["checkpoints", "tb", "hyps", "metrics.json"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        ".hydra/config.yaml",
        "notes.txt",
        "train.log",
    ]


def test_overwrite_and_resume_together_are_a_config_error() -> None:
    from attnseq.config.checks import validate

    with pytest.raises(UserError, match="give only one of them"):
        validate(tiny_config("resume=auto", "trainer.overwrite=true"))


def test_a_run_directory_that_is_a_file_is_refused_leaving_the_file(tmp_path: Path) -> None:
    taken = tmp_path / "notes.txt"
    taken.write_text("my notes\n")
    result = attnseq("train", f"hydra.run.dir={taken}", *TINY, cwd=tmp_path)
    assert "is a file; give a folder" in refusal(result)
    assert taken.read_text() == "my notes\n"
