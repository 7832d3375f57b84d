"""The CPU threads of a run or a command (attnseq/config/threads.py): every command that computes
runs with the threads asked for (`--threads N` or auto, or the override trainer.threads=N),
within an upper bound; without either with torch's default, which never depends on the
machine's load: the same command gives the same bits idle or busy. The Python API sets its
threads around each call and gives the caller's count back."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import TINY, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config import threads as threads_module
from attnseq.config.threads import check_threads, thread_limit
from attnseq.errors import UserError


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
        "average": [
            "average",
            str(checkpoint),
            str(shutil.copy(checkpoint, folder / "b.pt")),
            "--out",
            str(folder / "a.pt"),
        ],
        "visualize-alignment": [
            "visualize-alignment",
            str(checkpoint),
            "--src",
            "3 4 5",
            "--out",
            str(folder / "a.png"),
        ],
    }[name]


COMMANDS = ["eval", "translate", "score", "align", "heads", "visualize-alignment", "average"]


@pytest.mark.usefixtures("restored_threads")
@pytest.mark.parametrize("name", COMMANDS)
def test_every_computing_command_takes_threads(name: str, transformer: Path, tmp_path: Path):
    # from 3 down to 1, never up: two threads in each of the suite's workers would oversubscribe
    # the cores, and neither 3 (kept) nor the default (capped at the cores) is 1
    torch.set_num_threads(3)
    result = CliRunner().invoke(app, [*command(name, transformer, tmp_path), "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 1


@pytest.mark.usefixtures("restored_threads")
@pytest.mark.parametrize("name", ["eval", "translate"])
def test_the_threads_override_is_honoured(name: str, transformer: Path, tmp_path: Path):
    torch.set_num_threads(3)  # down to 1, as above
    arguments = command(name, transformer, tmp_path)
    arguments.insert(2, "trainer.threads=1")
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 1


def test_threads_below_one_exit_2(transformer: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, [*command("translate", transformer, tmp_path), "--threads", "0"]
    )
    assert result.exit_code == 2
    assert "--threads" in result.output


@pytest.mark.parametrize(
    ("cores", "torch_default", "expected"), [(2, 2, 2), (8, 8, 8), (16, 4, 4), (2, 8, 2)]
)
def test_the_default_is_torchs_capped_at_the_cores_and_never_reads_the_load(
    monkeypatch: pytest.MonkeyPatch, cores: int, torch_default: int, expected: int
) -> None:
    def load_average() -> tuple[float, float, float]:
        raise AssertionError("the default thread count read the load average")

    monkeypatch.setattr(threads_module, "usable_cores", lambda: cores)
    monkeypatch.setattr(threads_module.os, "getloadavg", load_average)
    monkeypatch.setattr(threads_module, "_torch_default", torch_default)
    assert threads_module.default_threads() == expected
    assert threads_module.resolve_threads(None) == expected


@pytest.mark.parametrize(
    ("cores", "load", "torch_default", "expected"),
    [(2, 0.1, 2, 2), (2, 1.2, 2, 1), (2, 2.6, 2, 1), (8, 3.4, 8, 5), (16, 0.0, 4, 4)],
)
def test_auto_leaves_busy_cores_alone(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, torch_default: int, expected: int
) -> None:
    monkeypatch.setattr(threads_module, "usable_cores", lambda: cores)
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(threads_module, "_torch_default", torch_default)
    assert threads_module.load_aware_threads() == expected
    assert threads_module.resolve_threads("auto") == expected


@pytest.mark.usefixtures("restored_threads")
def test_threads_auto_on_the_command_line(
    transformer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threads_module, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    monkeypatch.setattr(threads_module, "_torch_default", 2)
    torch.set_num_threads(2)
    arguments = [*command("translate", transformer, tmp_path), "--threads", "auto"]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 1  # 2 usable cores, one kept busy by another process


# What each value did before the bound: an OverflowError from torch (2**31, a C int), one from
# Python (20 digits, a C long), and libgomp asked for a billion threads' state (216 GB).
ABSURD = ["2147483648", "99999999999999999999", "1000000000"]


@pytest.mark.usefixtures("restored_threads")
@pytest.mark.parametrize("count", ABSURD)
@pytest.mark.parametrize("name", ["score", "average"])
def test_absurd_thread_counts_are_one_line_and_exit_2(
    name: str, count: str, transformer: Path, tmp_path: Path
) -> None:
    before = torch.get_num_threads()
    result = CliRunner().invoke(app, [*command(name, transformer, tmp_path), "--threads", count])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a usage error, no traceback
    assert "--threads" in result.output and f"1..{thread_limit()}" in result.output
    assert torch.get_num_threads() == before


def test_the_bound_is_four_threads_per_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads_module.os, "cpu_count", lambda: 3)
    assert thread_limit() == 12 == 4 * 3
    assert check_threads(12) == 12
    with pytest.raises(UserError, match=r"threads must be in 1\.\.12 \(4 per CPU"):
        check_threads(13)
    with pytest.raises(UserError, match="'many' is not a thread count"):
        check_threads("many")
    with pytest.raises(TypeError, match="threads must be an int, 'auto' or None, not float"):
        check_threads(1.5)
    with pytest.raises(TypeError, match="not bool"):
        check_threads(True)


@pytest.mark.usefixtures("restored_threads")
def test_an_absurd_threads_override_is_one_line(transformer: Path, tmp_path: Path) -> None:
    arguments = command("translate", transformer, tmp_path)
    arguments.insert(2, "trainer.threads=99999999999999999999")
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2, result.output
    assert "trainer.threads must be in 1.." in result.output


@pytest.mark.usefixtures("restored_threads")
def test_the_api_sets_threads_around_each_call_and_gives_them_back(transformer: Path) -> None:
    import attnseq

    torch.set_num_threads(1)
    model = attnseq.load(transformer, "cpu", threads=2)
    assert torch.get_num_threads() == 1  # loading changes nothing
    seen = []
    translate = model.translator.nbest_lists

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        yield from translate(*args, **kwargs)

    model.translator.nbest_lists = spy  # type: ignore[method-assign]
    model.translate("3 4 5")
    assert seen == [2] and torch.get_num_threads() == 1
    model.score("3 4 5", "5 4 3")
    assert torch.get_num_threads() == 1
    untouched = attnseq.load(transformer, "cpu")  # threads=None: the caller's count
    untouched.translate("3 4 5")
    assert torch.get_num_threads() == 1
    with pytest.raises(TypeError, match="threads must be an int, 'auto' or None, not float"):
        attnseq.load(transformer, "cpu", threads=1.5)
    with pytest.raises(UserError, match="threads must be in 1.."):
        attnseq.load(transformer, "cpu", threads=10**9)


def same_bits(first: object, second: object, where: str = "") -> list[str]:
    """Where two checkpoint entries differ: tensors bit for bit, everything else by ==."""
    if isinstance(first, torch.Tensor):
        same = isinstance(second, torch.Tensor) and first.dtype == second.dtype
        return [] if same and torch.equal(first, second) else [where]
    if isinstance(first, dict) and isinstance(second, dict):
        if first.keys() != second.keys():
            return [f"{where} keys"]
        return [d for key in first for d in same_bits(first[key], second[key], f"{where}/{key}")]
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        if len(first) != len(second):
            return [f"{where} length"]
        pairs = zip(first, second, strict=True)
        return [d for i, (a, b) in enumerate(pairs) for d in same_bits(a, b, f"{where}[{i}]")]
    return [] if first == second else [where]


@pytest.mark.slow
@pytest.mark.usefixtures("restored_threads")
def test_one_training_gives_the_same_bits_idle_or_beside_a_busy_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import attnseq
    from attnseq.io.checkpoint import load_checkpoint
    from attnseq.training import run

    counts: list[int] = []
    use_threads = run.use_threads

    def recorded(threads: object, *args: object) -> int:
        counts.append(use_threads(threads, *args))
        return counts[-1]

    monkeypatch.setattr(run, "use_threads", recorded)
    # a 2-core machine whose torch defaults to 2 threads (the suite's conftest sets 1 first)
    monkeypatch.setattr(threads_module, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads_module, "_torch_default", 2)
    default = [override for override in TINY if not override.startswith("trainer.threads")]
    steps = [*default, "trainer.max_steps=4", "trainer.validate_every=4", "trainer.progress=false"]
    saved = []
    for name, load in (("idle", 0.0), ("busy", 4.0)):
        monkeypatch.setattr(threads_module.os, "getloadavg", lambda load=load: (load, load, load))
        result = attnseq.train([*steps, "seed=5"], run_dir=tmp_path / name)
        saved.append(load_checkpoint(result.run_dir / "checkpoints" / "last.pt"))
    assert counts == [2, 2]  # the load did not choose the threads
    for entry in ("model", "optimizer", "scheduler"):
        assert not same_bits(saved[0][entry], saved[1][entry], entry)
