"""One run per run directory: `attnseq train` into a directory that holds a run continues it
(resume=auto), replaces it (trainer.overwrite=true) or is refused with one line and exit status 2
before anything in the directory changes, a refused resume leaves the run's record as it was,
and a time-stamped directory that already exists gives the new run a folder of its own.
`attnseq train` runs in this process (typer's CliRunner); tests/cli/test_app.py starts it through
the console entry point in a subprocess."""

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pytest
from helpers import attnseq, attnseq_in_process, tiny_config

from attnseq.errors import OutputError, UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training import run as training_run
from attnseq.training import run_directory
from attnseq.training.run import run_training
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
    result = attnseq_in_process("train", *TINY, *args, cwd=root)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "checkpoints" / "step_2.pt").is_file()
    return run_dir


@pytest.fixture
def old_run(finished_run: Path, tmp_path: Path) -> Path:
    """A copy of the finished run, byte for byte, in this test's own folder."""
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


@pytest.mark.slow
def test_a_plain_train_into_a_finished_run_is_refused_changing_nothing(
    old_run: Path, tmp_path: Path
) -> None:
    before = tree(old_run)
    result = attnseq_in_process(
        "train", *TINY, "trainer.max_steps=4", f"hydra.run.dir={old_run}", cwd=tmp_path
    )
    line = refusal(result)
    assert f"run directory {old_run} already holds a run" in line
    assert "resume=auto" in line and "hydra.run.dir" in line and "trainer.overwrite=true" in line
    assert tree(old_run) == before


@pytest.mark.slow
def test_resume_auto_continues_the_run_in_the_directory(old_run: Path, tmp_path: Path) -> None:
    args = ["trainer.max_steps=6", "trainer.keep_last=2", "resume=auto", f"hydra.run.dir={old_run}"]
    result = attnseq_in_process("train", *TINY, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(old_run / "checkpoints" / "last.pt")["progress"]["step"] == 6
    steps = sorted(path.name for path in (old_run / "checkpoints").glob("step_*.pt"))
    assert steps == ["step_4.pt", "step_6.pt"]  # the run's own retention carries on


@pytest.mark.slow
def test_overwrite_replaces_the_run_leaving_none_of_its_files(
    old_run: Path, tmp_path: Path
) -> None:
    (old_run / "eval").mkdir()
    (old_run / "eval" / "old.json").write_text("{}")
    (old_run / "notes.txt").write_text("mine")
    (old_run / "hyps" / "valid.txt").write_text("old hypotheses\n")
    (old_run / "metrics.json").write_text('{"from_the_old_run": 1}\n')
    args = ["trainer.max_steps=3", "trainer.keep_last=1", "trainer.overwrite=true"]
    result = attnseq_in_process("train", *TINY, *args, f"hydra.run.dir={old_run}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    checkpoints = sorted(path.name for path in (old_run / "checkpoints").iterdir())
    assert checkpoints == ["best.pt", "last.pt", "step_3.pt"]
    assert load_checkpoint(old_run / "checkpoints" / "last.pt")["progress"]["step"] == 3
    assert "from_the_old_run" not in (old_run / "metrics.json").read_text()
    assert sorted(path.name for path in (old_run / "hyps").iterdir()) == ["test.txt"]
    assert not (old_run / "eval").exists() or not any((old_run / "eval").iterdir())
    assert (old_run / "notes.txt").read_text() == "mine"  # not the run's: kept
    assert "trainer.overwrite=true" in (old_run / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.slow
def test_a_refused_resume_leaves_the_run_record_byte_identical(
    old_run: Path, tmp_path: Path
) -> None:
    before = tree(old_run)
    conflicting = ["model=rnn_luong", "resume=auto"]
    result = attnseq_in_process(
        "train", *TINY, *conflicting, f"hydra.run.dir={old_run}", cwd=tmp_path
    )
    line = refusal(result)
    assert "cannot resume from" in line
    assert "model.decoder: checkpoint 'bahdanau', now 'luong'" in line
    assert tree(old_run) == before  # .hydra/config.yaml and overrides.yaml included


@pytest.mark.slow
def test_a_config_error_exits_2_before_the_run_directory_exists(tmp_path: Path) -> None:
    run_dir = tmp_path / "new"
    result = attnseq_in_process(
        "train", *TINY, "model.hiden=3", f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert "model.hidden" in refusal(result)
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_training_in_progress_is_named_rather_than_the_run(old_run: Path, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(old_run)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        before = tree(old_run)
        result = attnseq_in_process("train", *TINY, f"hydra.run.dir={old_run}", cwd=tmp_path)
    finally:
        process.kill()
        process.wait()
    line = refusal(result)
    assert "is in use" in line and f"pid {process.pid}" in line
    assert tree(old_run) == before


@pytest.mark.slow
def test_a_rerun_into_a_sweep_folder_is_refused_per_job(old_run: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    old_run.rename(sweep / "1")  # job 1 of the sweep below (seed=2)
    before = tree(sweep)
    args = ["-m", "seed=1,2", f"hydra.sweep.dir={sweep}"]
    line = refusal(attnseq_in_process("train", *TINY, *args, cwd=tmp_path))
    assert f"run directory {sweep / '1'} already holds a run" in line
    assert "resume=auto" in line and "hydra.sweep.dir" in line
    assert tree(sweep) == before  # no multirun.yaml, no job 0


@pytest.mark.slow
def test_a_refused_resume_in_a_sweep_changes_nothing(old_run: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    old_run.rename(sweep / "0")
    before = tree(sweep)
    args = ["-m", "model.hidden=32,16", "resume=auto", f"hydra.sweep.dir={sweep}"]
    line = refusal(
        attnseq_in_process("train", *[a for a in TINY if "hidden" not in a], *args, cwd=tmp_path)
    )
    assert f"cannot resume from {sweep / '0'}" in line  # job 0 (model.hidden=32)
    assert "model.hidden: checkpoint 16, now 32" in line
    assert tree(sweep) == before


@pytest.mark.slow
def test_under_a_sweeper_choosing_its_jobs_every_job_folder_is_checked(
    old_run: Path, tmp_path: Path
) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    old_run.rename(sweep / "3")
    before = tree(sweep)
    args = ["-m", "hparams_search=reverse_optuna", f"hydra.sweep.dir={sweep}"]
    line = refusal(attnseq_in_process("train", *TINY, *args, cwd=tmp_path))
    assert f"run directory {sweep / '3'} already holds a run" in line
    assert tree(sweep) == before


@pytest.mark.slow
def test_the_resume_command_of_an_overwriting_run_leaves_overwrite_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The printed command continues the run: with overwrite it would be refused."""

    def fail(cfg, run_dir):
        raise OutputError("cannot write x: No space left on device")

    monkeypatch.setattr(training_run, "run_training", fail)
    args = ["trainer.overwrite=true", f"hydra.run.dir={tmp_path / 'run'}"]
    command = refusal(attnseq_in_process("train", *args, cwd=tmp_path))
    command = command.split("continue with: ", 1)[1]
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
    result = attnseq_in_process("train", *TINY, *args, cwd=tmp_path)
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
    result = attnseq_in_process("train", f"hydra.run.dir={taken}", *TINY, cwd=tmp_path)
    assert "is a file; give a folder" in refusal(result)
    assert taken.read_text() == "my notes\n"


# ------------------------------------------------------------
# One trainer per run directory: a second training into a directory another process trains
# in stops with exit status 2 and one line naming the holder, before writing anything; a lock
# left by a killed process does not block; a run directory the lock cannot be written in
# (read-only file system, full disk, no permission) stops the same way.


def holder(run_dir: Path) -> subprocess.Popen:
    """Another process holding the lock of run_dir (until it is killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    return process


def test_a_held_directory_refuses_a_second_holder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = holder(run_dir)
    try:
        with pytest.raises(UserError) as error:
            run_directory.acquire(run_dir)
        message = str(error.value)
        assert f"pid {process.pid} on " in message and "in use" in message
        assert "\n" not in message
        # the library entry point too: nothing read or written, no checkpoint folder
        with pytest.raises(UserError, match=f"pid {process.pid}"):
            run_training(tiny_config(), run_dir)
        assert sorted(p.name for p in run_dir.iterdir()) == [run_directory.LOCK_NAME]
    finally:
        process.kill()
        process.wait()


def test_a_lock_left_by_a_killed_process_is_free(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = holder(run_dir)
    process.send_signal(signal.SIGKILL)
    process.wait()
    left = json.loads((run_dir / run_directory.LOCK_NAME).read_text())
    assert left["pid"] == process.pid  # the file stays; the kernel released the lock
    with run_directory.run_directory_lock(run_dir):
        mine = json.loads((run_dir / run_directory.LOCK_NAME).read_text())
        assert mine["pid"] == os.getpid()
        with run_directory.run_directory_lock(run_dir):  # reentrant within one process
            pass
        assert run_dir.resolve() in run_directory._held  # still held after the inner exit
    assert run_dir.resolve() not in run_directory._held
    # given back: another process can take it now
    other = holder(run_dir)
    other.kill()
    other.wait()


def test_cli_train_into_a_busy_directory_exits_2_writing_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = holder(run_dir)
    try:
        result = attnseq_in_process(
            "train", *helpers.TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path
        )
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run directory")
    assert f"pid {process.pid}" in lines[0] and "Traceback" not in result.stderr
    # Hydra never ran: no .hydra/, no train.log, no checkpoints
    assert sorted(p.name for p in run_dir.iterdir()) == [run_directory.LOCK_NAME]


def erofs(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))


@pytest.mark.parametrize("where", ["mkdir", "open", "write"])
def test_a_read_only_run_directory_is_one_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """EROFS wherever the lock meets it (creating the directory, opening or writing the lock
    file) is a one-line UserError naming the directory; the lock is not held."""
    run_dir = tmp_path / "runs" / "run"
    if where == "mkdir":
        monkeypatch.setattr(run_directory.Path, "mkdir", erofs)
    elif where == "open":
        monkeypatch.setattr(run_directory.os, "open", erofs)
    else:
        monkeypatch.setattr(run_directory.os, "pwrite", erofs)
    with pytest.raises(UserError) as error:
        run_directory.acquire(run_dir)
    monkeypatch.undo()
    message = str(error.value)
    assert f"run directory {run_dir}" in message and "Read-only file system" in message
    assert "\n" not in message
    assert run_dir.resolve() not in run_directory._held


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_run_directory_without_write_permission_is_one_user_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_dir.chmod(0o555)
    try:
        with pytest.raises(UserError, match=f"cannot write into run directory {run_dir}"):
            run_directory.acquire(run_dir)
    finally:
        run_dir.chmod(0o755)
    assert list(run_dir.iterdir()) == []


def test_cli_train_into_a_read_only_run_directory_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`attnseq train hydra.run.dir=RUN` on a read-only file system (every open under RUN
    fails with EROFS): one line, exit 2, nothing written."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(run_dir)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    result = attnseq_in_process("train", *helpers.TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    monkeypatch.undo()
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: hydra.run.dir {run_dir}: cannot write into {run_dir}")
    assert "Read-only file system" in lines[0] and "Traceback" not in result.stderr
    assert list(run_dir.iterdir()) == []


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_two_trainings_into_one_directory(tmp_path: Path) -> None:
    """A real first training keeps its directory: the second exits 2 with one line, the first's
    .hydra/ and log are untouched by it, and the first ends normally with its own checkpoint."""
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnseq",
            "train",
            *helpers.TINY,
            "trainer.max_steps=100000",
            "trainer.max_epochs=100000",
            "trainer.validate_every=5",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        last = run_dir / "checkpoints" / "last.pt"
        for _ in range(600):  # the first has started training once it saved a checkpoint
            if last.is_file() or first.poll() is not None:
                break
            time.sleep(0.1)
        assert last.is_file() and first.poll() is None
        hydra_files = digest(run_dir / ".hydra")
        second = attnseq(
            "train", *helpers.TINY, "data.train_size=37", f"hydra.run.dir={run_dir}", cwd=tmp_path
        )
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: run directory")
        assert f"pid {first.pid}" in lines[0]
        assert digest(run_dir / ".hydra") == hydra_files
        assert first.poll() is None  # still training
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
        assert first.returncode == 143
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    config = load_checkpoint(last)["config"]
    assert config["data"]["train_size"] == 200  # the first run's, not the second's
    assert "train: 37 pairs" not in (run_dir / "train.log").read_text()


def test_missing_or_unreadable_data_leaves_no_run_directory(tmp_path: Path) -> None:
    """Data files are found and opened before Hydra makes a run directory: nothing is left
    under outputs/ for a run that cannot start."""
    missing = attnseq_in_process(
        "train", "data=multi30k", f"data.root={tmp_path / 'nowhere'}", cwd=tmp_path
    )
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.startswith("error: data file not found:"), missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    root = tmp_path / "data"
    (root / "multi30k").mkdir(parents=True)
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            (root / "multi30k" / f"{split}.{lang}").write_text("ein Hund\n")
    (root / "multi30k" / "val.en").chmod(0)
    if os.access(root / "multi30k" / "val.en", os.R_OK):
        pytest.skip("running as a user who reads any file (root): no unreadable file to try")
    unreadable = attnseq_in_process("train", "data=multi30k", f"data.root={root}", cwd=tmp_path)
    assert unreadable.returncode == 2 and "cannot read data file" in unreadable.stderr
    assert not (tmp_path / "outputs").exists()


def test_a_finished_run_keeps_no_lock_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(tiny_config("trainer.max_steps=1"), run_dir)
    assert (run_dir / "metrics.json").is_file()
    assert not (run_dir / run_directory.LOCK_NAME).exists()


def test_a_lock_file_removed_by_its_finishing_holder_is_not_taken(tmp_path: Path) -> None:
    """A process that opened the lock file just before its holder removed it and let go must
    not lock that nameless file: a third process would lock the new one beside it."""
    run_dir = tmp_path / "run"
    run_directory.acquire(run_dir)
    late = os.open(run_dir / run_directory.LOCK_NAME, os.O_RDWR)  # opened while held
    try:
        run_directory.release(run_dir)
        assert not run_directory._still_named(late, run_dir / run_directory.LOCK_NAME)
        with run_directory.run_directory_lock(run_dir):  # takes a new file by that name
            fd = run_directory._held[run_dir.resolve()].fd
            assert run_directory._still_named(fd, run_dir / run_directory.LOCK_NAME)
    finally:
        os.close(late)
