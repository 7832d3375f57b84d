"""The options several commands share (attnseq/cli/options.py): a run directory given for a
checkpoint stands for its best checkpoint, or says which file to pass."""

import shutil
from pathlib import Path

import pytest
from helpers import invoke, one_error_line


@pytest.fixture(scope="module")
def run_dir(rnn_checkpoint, tmp_path_factory) -> Path:
    """A run directory of `attnseq train`: .hydra/, train.log, checkpoints/best.pt."""
    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / ".hydra").mkdir()
    (run_dir / "train.log").write_text("")
    (run_dir / "checkpoints").mkdir()
    shutil.copy(rnn_checkpoint, run_dir / "checkpoints" / "best.pt")
    return run_dir


def _texts(folder: Path) -> tuple[Path, Path]:
    src, tgt = folder / "x.src", folder / "x.tgt"
    src.write_text("March 3, 1998\n")
    tgt.write_text("1998-03-03\n")
    return src, tgt


@pytest.mark.parametrize(
    "command", ["eval", "translate", "score", "align", "heads", "visualize-alignment"]
)
def test_a_run_directory_stands_for_its_best_checkpoint(command, run_dir, tmp_path) -> None:
    src, tgt = _texts(tmp_path)
    arguments = {
        "eval": ["--out", tmp_path / "eval"],
        "translate": ["--input", src],
        "score": ["--src", src, "--tgt", tgt],
        "align": ["--src", src, "--tgt", tgt],
        "heads": [],
        "visualize-alignment": ["--src", "March 3, 1998", "--out", tmp_path / "a.png"],
    }[command]
    result = invoke(command, run_dir, *arguments)
    best = run_dir / "checkpoints" / "best.pt"
    assert result.stderr.startswith(f"using {best} (the best checkpoint of the run directory")
    if command == "heads":  # read as the checkpoint: heads then says it needs a transformer
        line = one_error_line(result.stderr.split("\n", 1)[1], "transformer")
        assert str(run_dir) not in line
    else:
        assert result.exit_code == 0, result.output


def test_a_run_directory_without_a_best_checkpoint_says_what_to_pass(
    rnn_checkpoint, tmp_path
) -> None:
    started = tmp_path / "started"
    (started / ".hydra").mkdir(parents=True)
    result = invoke("eval", started)
    assert result.exit_code == 2
    one_error_line(
        result.stderr, f"{started} is a run directory that holds no checkpoint", "pass a"
    )
    (started / "checkpoints").mkdir()
    shutil.copy(rnn_checkpoint, started / "checkpoints" / "last.pt")
    result = invoke("translate", started)
    assert result.exit_code == 2
    one_error_line(
        result.stderr, "without checkpoints/best.pt", f"e.g. {started}/checkpoints/last.pt"
    )
    folder = tmp_path / "some_folder"  # no run directory: named as a folder
    folder.mkdir()
    result = invoke("eval", folder)
    one_error_line(result.stderr, f"{folder} is a folder, not a checkpoint file")
