"""Output paths are checked before the work, and a write the user can fix (full disk, read-only
folder) ends in one line with exit status 2, the old file intact."""

import errno
import os
from pathlib import Path

import pytest
from helpers import tiny_config, untrained_checkpoint
from typer.testing import CliRunner

import attnseq.io.atomic
from attnseq.cli.app import app
from attnseq.errors import OutputError
from attnseq.io.atomic import atomic_write_text
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.run import run_training

runner = CliRunner()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_checkpoint(tmp_path_factory.mktemp("ckpt") / "model.pt")


def one_line_exit_2(result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_outputs_that_cannot_be_written_are_refused_first(checkpoint: Path, tmp_path: Path):
    folder = tmp_path / "folder"
    folder.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["average", str(checkpoint), "--out", str(folder)], "is a folder; give a file name"),
        (["translate", str(checkpoint), "-o", str(folder)], "is a folder; give a file name"),
        (["eval", str(checkpoint), "--out", str(a_file)], "is a file; give a folder"),
        (["eval", str(checkpoint), "--batch-size", "-5"], "--batch-size must be at least 1"),
        (
            ["visualize-alignment", str(checkpoint), "--src", "x", "--out", str(folder)],
            "is a folder; give a file name",
        ),
        (
            [
                "visualize-alignment",
                str(checkpoint),
                "--src",
                "x",
                "--out",
                str(tmp_path / "a.txt"),
            ],
            "unknown format '.txt'; use one of",
        ),
        (
            ["sweep-report", str(tmp_path), "--plot", str(tmp_path / "r.txt")],
            "unknown format '.txt'",
        ),
        (
            ["translate", str(checkpoint), "-o", str(a_file / "out.txt")],
            "is a file, not a folder",
        ),
    ]
    for args, expected in cases:
        result = runner.invoke(app, args, input="3 March 1998\n")
        one_line_exit_2(result, expected)
    assert a_file.read_text() == "x" and list(folder.iterdir()) == []


def fail_fsync_with(code: int, monkeypatch: pytest.MonkeyPatch, after: int = 0) -> None:
    """os.fsync in the atomic writer raises OSError(code) after `after` successful calls."""
    calls = {"n": 0}
    real = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] > after:
            raise OSError(code, os.strerror(code))
        real(fd)

    monkeypatch.setattr(attnseq.io.atomic.os, "fsync", fsync)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_fixable_write_failure_is_one_line_and_keeps_the_old_file(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old\n")
    fail_fsync_with(code, monkeypatch)
    result = runner.invoke(app, ["translate", str(checkpoint), "-o", str(target)], "a\n")
    one_line_exit_2(result, f"cannot write {target}: {os.strerror(code)}")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # no temporary left behind


def test_a_full_disk_during_training_keeps_the_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run stops with an OutputError; last.pt is the previous complete save."""
    cfg = tiny_config(
        "trainer.max_steps=9", "trainer.save_every_steps=3", "trainer.validate_every=100"
    )
    writes = {"n": 0}
    real_replace = attnseq.io.atomic.os.replace

    def replace(src, dst):  # count completed writes; the disk fills after last.pt at step 3
        writes["n"] += 1
        real_replace(src, dst)
        if Path(dst).name == "last.pt" and load_checkpoint(dst)["progress"]["step"] == 3:
            fail_fsync_with(errno.ENOSPC, monkeypatch)

    monkeypatch.setattr(attnseq.io.atomic.os, "replace", replace)
    with pytest.raises(OutputError, match="No space left on device"):
        run_training(cfg, tmp_path)
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["progress"]["step"] == 3
    assert not list((tmp_path / "checkpoints").glob(".*.tmp"))


def test_the_training_message_says_how_to_continue(tmp_path: Path) -> None:
    """attnseq train turns an OutputError into one line with the resume=auto command."""
    import subprocess
    import sys

    code = (
        "import sys, attnseq.training.run as t, attnseq.errors as e\n"
        "def fail(cfg, run_dir): raise e.OutputError('cannot write x: No space left on device')\n"
        "t.run_training = fail\n"
        "from attnseq.cli.app import main\n"
        "sys.argv = ['attnseq', 'train', 'hydra.run.dir=' + sys.argv[1]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "No space left on device; fix that, then continue with:" in last
    assert "resume=auto" in last and f"hydra.run.dir={tmp_path / 'run'}" in last


def test_an_output_over_an_input_is_refused_by_any_path(tmp_path: Path):
    from attnseq.errors import UserError
    from attnseq.io.user_paths import refuse_output_over_inputs

    source = tmp_path / "s.txt"
    source.write_text("a b\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.txt").symlink_to(source)
    os.link(source, tmp_path / "hard.txt")
    for spelling in [
        source,
        tmp_path / "sub" / ".." / "s.txt",
        tmp_path / "link.txt",
        tmp_path / "hard.txt",
    ]:
        with pytest.raises(UserError, match="is the input --src"):
            refuse_output_over_inputs(spelling, "--out", [("--src", source), ("--gold", None)])
    refuse_output_over_inputs(tmp_path / "new.txt", "--out", [("--src", source)])
    assert source.read_text() == "a b\n"


def test_a_folder_holding_an_input_is_refused(tmp_path: Path):
    from attnseq.errors import UserError
    from attnseq.io.user_paths import refuse_folder_holding_inputs

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    checkpoint = run / "checkpoints" / "best.pt"
    checkpoint.write_bytes(b"x")
    for folder in [run, run / "checkpoints", tmp_path]:
        with pytest.raises(UserError, match="holds the input CHECKPOINT"):
            refuse_folder_holding_inputs(folder, "OUT", [("CHECKPOINT", checkpoint)])
    refuse_folder_holding_inputs(tmp_path / "export", "OUT", [("CHECKPOINT", checkpoint)])
    (tmp_path / "other").mkdir()
    refuse_folder_holding_inputs(tmp_path / "other", "OUT", [("CHECKPOINT", checkpoint)])
