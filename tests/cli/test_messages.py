"""Messages that say what is really wrong, across the commands: an experiment YAML whose top level
is a list, a file that is no checkpoint at all, an input text path that is a device, a named
pipe, a folder or an empty file, a path whose name is too long. Each ends with one `error:` line
and exit status 2, without a traceback."""

import os
import pickle
from pathlib import Path

import pytest
from helpers import attnseq_in_process, invoke, one_error_line


def test_experiment_yaml_whose_top_level_is_a_list(tmp_path: Path) -> None:
    config = tmp_path / "my.yaml"
    config.write_text("# @package _global_\n- model:\n    hidden: 8\n- seed: 3\n")
    before = config.read_bytes()
    result = attnseq_in_process("train", f"config={config}", "trainer.threads=1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr, f"config file {config}", "top level is a list", "mapping")
    assert "ConfigTypeError" not in line and "user_file__" not in line
    assert config.read_bytes() == before
    assert not (tmp_path / "outputs").exists()


def _not_checkpoints(folder: Path) -> dict[str, tuple[Path, str]]:
    """{case: (file, what the message says it is)} of files that are no torch checkpoint."""
    text = folder / "notes.txt"
    text.write_text("the cat sat on the mat\nsecond line\n")
    empty = folder / "empty.pt"
    empty.write_bytes(b"")
    binary = folder / "image.pt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return {
        "text": (text, "a text file, starting 'the cat sat on the mat'"),
        "empty": (empty, "the file is empty"),
        "binary": (binary, "a binary file starting with bytes 89 50 4e 47"),
    }


@pytest.mark.parametrize("case", ["text", "empty", "binary"])
def test_a_file_that_is_no_checkpoint_is_named_so(case: str, tmp_path: Path) -> None:
    path, what = _not_checkpoints(tmp_path)[case]
    src = tmp_path / "src.txt"
    src.write_text("a b\n")
    before = path.read_bytes()
    commands = {
        "eval": ["eval", path],
        "translate": ["translate", path, "--input", src],
        "score": ["score", path, "--src", src, "--tgt", src],
        "align": ["align", path, "--src", src, "--tgt", src],
        "heads": ["heads", path],
    }
    for command, args in commands.items():
        result = invoke(*args)
        assert result.exit_code == 2, (command, result.output)
        line = one_error_line(result.stderr, f"{path} is not an attnseq checkpoint ({what}")
        assert "run code" not in line and "weights_only" not in line, (command, line)
    assert path.read_bytes() == before


def test_a_crafted_pickle_is_still_refused_as_code(tmp_path: Path) -> None:
    """A pickle that would call a function when loaded is refused, and runs nothing."""
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps(_Payload(marker)))
    result = invoke("eval", evil)
    assert result.exit_code == 2
    line = one_error_line(result.stderr, f"{evil} is not an attnseq checkpoint", "could run code")
    assert "weights_only" not in line
    assert not marker.exists()


def test_a_saved_module_is_not_a_checkpoint_in_one_line(tmp_path: Path) -> None:
    """`torch.save(model)` pickles a whole module: refused in one line naming its class,
    without torch's paragraph about weights_only."""
    import torch

    module = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2), module)
    result = invoke("eval", module)
    assert result.exit_code == 2
    line = one_error_line(
        result.stderr, f"{module} is not an attnseq checkpoint (a pickle that refers"
    )
    assert "torch.nn.modules.linear.Linear" in line and "weights_only" not in line


class _Payload:
    """Unpickling this object would create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _odd_input(kind: str, folder: Path) -> tuple[Path, str]:
    """(path, what the message calls it) of an input that is no readable text file."""
    if kind == "device":
        return Path(os.devnull), "is a character device, not a regular text file"
    if kind == "fifo":
        fifo = folder / "pipe"
        os.mkfifo(fifo)
        return fifo, "is a named pipe (FIFO), not a regular text file"
    if kind == "folder":
        inside = folder / "texts"
        inside.mkdir()
        return inside, "is a folder, not a text file"
    empty = folder / "empty.tsv"
    empty.write_bytes(b"")
    return empty, "is empty: it holds no lines to read"


def _commands(checkpoint: Path, odd: Path, folder: Path) -> dict[str, tuple[list, str]]:
    """{command: (arguments, how the message names the input)} reading `odd` as a text."""
    good = folder / "good.txt"
    good.write_text("1 march 1998\n")
    gold = folder / "gold.txt"
    gold.write_text("0-0\n")
    figures = folder / "figures"
    return {
        "score": (["score", checkpoint, "--src", odd, "--tgt", good], f"--src file {odd}"),
        "align": (["align", checkpoint, "--src", good, "--tgt", odd], f"--tgt file {odd}"),
        "translate": (["translate", checkpoint, "--input", odd], f"--input file {odd}"),
        "visualize": (
            ["visualize-alignment", checkpoint, "--input", odd, "--out", figures],
            f"--input file {odd}",
        ),
        "eval alignments": (
            [
                "eval",
                checkpoint,
                "--out",
                folder / "eval",
                "--gold",
                gold,
                "--gold-src",
                odd,
                "--gold-tgt",
                good,
            ],
            f"--gold-src file {odd}",
        ),
        "eval split": (
            ["eval", checkpoint, "--out", folder / "eval", "--split", odd],
            f"data file {odd}",
        ),
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["device", "fifo", "folder", "empty"])
def test_an_input_that_is_no_readable_text_file_is_named_so(
    rnn_checkpoint: Path, kind: str, tmp_path: Path
) -> None:
    odd, what = _odd_input(kind, tmp_path)
    for command, (args, name) in _commands(rnn_checkpoint, odd, tmp_path).items():
        if command == "translate" and kind == "fifo":
            continue  # translate streams a named pipe (decoding/test_translate.py)
        result = invoke(*args)
        assert result.exit_code == 2, (command, result.output)
        line = one_error_line(result.stderr, f"{name} {what}")
        assert "not found" not in line, (command, line)
    assert not (tmp_path / "eval").exists() and not (tmp_path / "figures").exists()


def test_a_path_whose_name_is_too_long_is_one_line(rnn_checkpoint: Path, tmp_path: Path) -> None:
    """A file name longer than the file system allows (255 bytes) makes every look at the path
    raise OSError (ENAMETOOLONG): each command names the option instead of a traceback."""
    long = tmp_path / ("x" * 300) / "a.txt"
    text = tmp_path / "a.txt"
    text.write_text("June 5, 2001\n")
    cases = {
        "CHECKPOINT": ["translate", long],
        "--input": ["translate", rnn_checkpoint, "--input", long],
        "--out": ["score", rnn_checkpoint, "--src", text, "--tgt", text, "--out", long],
        "CHECKPOINTS": ["average", rnn_checkpoint, long, "--out", tmp_path / "avg.pt"],
        "MULTIRUN_DIR": ["sweep-report", long],
        "checkpoint": ["eval", rnn_checkpoint, str(long) + ".pt", "--out", tmp_path / "eval"],
    }
    for name, args in cases.items():
        result = invoke(*args)
        assert result.exit_code == 2, (name, result.output)
        line = one_error_line(
            result.stderr, f"{name} {str(tmp_path)[:30]}", "more characters", "long"
        )
        assert len(line) < 300, line
    result = invoke("eval", rnn_checkpoint, "--split", "x" * 300, "--out", tmp_path / "eval")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    one_error_line(result.stderr, "xxx")
