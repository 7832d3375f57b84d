"""Every command that computes runs with the CPU threads asked for (`--threads N`, or the
override trainer.threads=N), and without either with the cores no other process keeps busy."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.models import loading


@pytest.fixture
def restored_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def transformer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("threads")
    return untrained_checkpoint(
        folder / "t.pt", "model.family=transformer", "data.test_size=4", "data.valid_size=4"
    )


def command(name: str, checkpoint: Path, folder: Path) -> list[str]:
    """`attnseq NAME` on the tiny checkpoint, with the inputs the command needs."""
    (folder / "in.txt").write_text("3 4 5\n", encoding="utf-8")
    text = str(folder / "in.txt")
    return {
        "eval": ["eval", str(checkpoint), "--out", str(folder / "eval")],
        "translate": ["translate", str(checkpoint), "-i", text],
        "score": ["score", str(checkpoint), "--src", text, "--tgt", text],
        "align": ["align", str(checkpoint), "--src", text, "--tgt", text],
        "heads": ["heads", str(checkpoint), "--max-batches", "1", "--report-dir", str(folder)],
        "average": ["average", str(checkpoint), str(shutil.copy(checkpoint, folder / "b.pt")),
                    "--out", str(folder / "a.pt")],
        "visualize-alignment": [
            "visualize-alignment", str(checkpoint), "--src", "3 4 5", "--out",
            str(folder / "a.png"),
        ],
    }[name]  # fmt: skip


COMMANDS = ["eval", "translate", "score", "align", "heads", "visualize-alignment", "average"]


@pytest.mark.usefixtures("restored_threads")
@pytest.mark.parametrize("name", COMMANDS)
def test_every_computing_command_takes_threads(name: str, transformer: Path, tmp_path: Path):
    torch.set_num_threads(1)
    result = CliRunner().invoke(app, [*command(name, transformer, tmp_path), "--threads", "2"])
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("restored_threads")
@pytest.mark.parametrize("name", ["eval", "translate"])
def test_the_threads_override_is_honoured(name: str, transformer: Path, tmp_path: Path):
    torch.set_num_threads(1)
    arguments = command(name, transformer, tmp_path)
    arguments.insert(2, "trainer.threads=2")
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 2


def test_threads_below_one_exit_2(transformer: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, [*command("translate", transformer, tmp_path), "--threads", "0"]
    )
    assert result.exit_code == 2
    assert "--threads" in result.output


@pytest.mark.parametrize(
    ("cores", "load", "torch_default", "expected"),
    [(2, 0.1, 2, 2), (2, 1.2, 2, 1), (2, 2.6, 2, 1), (8, 3.4, 8, 5), (16, 0.0, 4, 4)],
)
def test_the_default_leaves_busy_cores_alone(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, torch_default: int, expected: int
) -> None:
    monkeypatch.setattr(loading, "usable_cores", lambda: cores)
    monkeypatch.setattr(loading.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(loading, "TORCH_DEFAULT_THREADS", torch_default)
    assert loading.default_threads() == expected
