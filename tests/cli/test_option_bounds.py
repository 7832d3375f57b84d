"""Integer options have upper bounds: an absurd value is one line and exit status 2 before any
work, never an OverflowError from torch or an allocation of terabytes. Sizes whose memory
depends on the model (a beam, the samples) go through the memory estimate; values that overflow
a C type or have a fixed sane range (seeds, integration points) are bounded by the option."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnseq.cli.app import app

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")


@pytest.fixture(scope="module")
def files(
    tmp_path_factory: pytest.TempPathFactory, untrained_checkpoints: dict[str, Path]
) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bounds")
    (folder / "src.txt").write_text("June 5, 2001\n3 4 5\n", encoding="utf-8")
    (folder / "tgt.txt").write_text("2001-06-05\n5 4 3\n", encoding="utf-8")
    return {
        **untrained_checkpoints,
        "src": folder / "src.txt",
        "tgt": folder / "tgt.txt",
        "folder": folder,
    }


def run(*arguments: str) -> tuple[int, str]:
    """`attnseq ARGUMENTS` in this process: (exit status, output); an exception other than the
    command's exit fails the test (it would be a traceback)."""
    result = CliRunner().invoke(app, [*arguments, "--device", "cpu", "--threads", "1"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


# What each did before: an allocation the machine refused or the kernel's OOM killer answered
# (RuntimeError: "you tried to allocate 34359738248 bytes"), or an OverflowError from torch.
CASES = [
    ("translate", ["--beam", "2147483648"], "needs at least"),
    ("translate", ["--sample", "--num-samples", "2147483648"], "needs at least"),
    ("translate", ["--sample", "--num-samples", "99999999999999999999"], "must fit in a 64-bit"),
    ("translate", ["--sample", "--seed", "99999999999999999999"], "--seed"),
    ("eval", ["--beam", "2147483648"], "decoding test with decoding.beam=2147483648 needs"),
    ("eval", ["--sample", "--seed", "99999999999999999999"], "--seed"),
    (
        "align",
        ["--method", "smoothgrad", "--smoothgrad-samples", "2147483648"],
        "less than or equal to 1000",
    ),
    (
        "align",
        ["--method", "integrated-gradients", "--ig-steps", "2147483648"],
        "less than or equal to 1000",
    ),
    ("align", ["--method", "smoothgrad", "--seed", "99999999999999999999"], "--seed"),
]


@pytest.mark.parametrize(("name", "options", "message"), CASES, ids=lambda v: str(v)[:40])
def test_absurd_integers_are_one_line_and_exit_2(
    name: str, options: list[str], message: str, files: dict[str, Path]
) -> None:
    model = files["transformer" if name == "align" else "rnn"]
    inputs = {
        "translate": ["-i", str(files["src"])],
        "eval": ["--out", str(files["folder"] / "eval")],
        "align": ["--src", str(files["src"]), "--tgt", str(files["tgt"])],
    }[name]
    status, output = run(name, str(model), *inputs, *options)
    assert status == 2, output
    assert message in output
    assert not (files["folder"] / "eval").exists()  # refused before it wrote anything


@pytest.mark.slow
def test_the_same_options_within_bounds_still_work(files: dict[str, Path]) -> None:
    status, output = run("translate", str(files["rnn"]), "-i", str(files["src"]), "--beam", "3")
    assert status == 0, output
    arguments = ["--sample", "--seed", str(2**64 - 1), "--num-samples", "2"]
    status, output = run("translate", str(files["rnn"]), "-i", str(files["src"]), *arguments)
    assert status == 0, output
