"""Every file attnseq writes gets the mode the umask gives a new file (0644 under umask 022,
0600 under 077): checkpoints, metrics.json, hyps/, eval results, saved attention, sweep
reports, `translate -o`, figures and the data cache. The atomic writer's private temporary
file must not leak its 0600."""

import fnmatch
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import local_tsv, tiny_config
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.io.atomic import atomic_write_text, current_umask, new_file_mode
from attnseq.training.run import run_training


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def modes(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative name) -> its permission bits in octal."""
    return {
        path.relative_to(folder).as_posix(): oct(stat.S_IMODE(path.stat().st_mode))
        for path in folder.rglob("*")
        if path.is_file()
    }


def test_the_umask_is_read_without_changing_it(umask: int) -> None:
    assert current_umask() == umask
    assert os.umask(umask) == umask  # still set: reading it changed nothing
    assert new_file_mode() == 0o666 & ~umask


def test_an_atomic_write_gets_the_umask_mode(umask: int, tmp_path: Path) -> None:
    target = tmp_path / "result.txt"
    atomic_write_text(target, "old")
    os.chmod(target, 0o600)
    atomic_write_text(target, "new")  # a new file: the umask's mode, not the old file's
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask


def write_sweep(root: Path) -> None:
    """A finished two-job multirun folder, as `attnseq train -m seed=1,2` leaves it."""
    (root / "multirun.yaml").parent.mkdir(parents=True)
    (root / "multirun.yaml").write_text("trainer:\n  early_stopping_metric: exact_match\n")
    for job, seed in (("0", 1), ("1", 2)):
        (root / job / ".hydra").mkdir(parents=True)
        (root / job / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n")
        (root / job / "metrics.json").write_text(f'{{"test/exact_match": 0.{seed}}}\n')


@pytest.mark.slow
def test_everything_a_run_eval_report_and_translate_write_has_the_umask_mode(
    umask: int, tmp_path: Path
) -> None:
    run_dir, outputs = tmp_path / "run", tmp_path / "outputs"
    run_training(tiny_config("trainer.max_steps=4", "trainer.keep_last=2"), run_dir)
    best = str(run_dir / "checkpoints" / "best.pt")
    last = str(run_dir / "checkpoints" / "last.pt")
    runner = CliRunner()
    commands = [
        ["eval", best, "--save-attention"],
        ["eval", best, "--split", "valid", "--out", str(outputs / "eval")],
        ["translate", best, "--beam", "1", "-o", str(outputs / "translated.txt")],
        ["average", best, last, "--out", str(outputs / "averaged.pt")],
        ["visualize-alignment", best, "--src", "a b c", "--out", str(outputs / "a.png")],
        ["sweep-report", str(tmp_path / "sweep")],
    ]
    write_sweep(tmp_path / "sweep")
    for command in commands:
        result = runner.invoke(app, command, input="a b c\n")
        assert result.exit_code == 0, (command, result.output)
    written = {
        **{f"run/{name}": mode for name, mode in modes(run_dir).items()},
        **{f"outputs/{name}": mode for name, mode in modes(outputs).items()},
    }
    for name in ("report.csv", "report.png"):
        path = tmp_path / "sweep" / name
        written[f"sweep/{name}"] = oct(stat.S_IMODE(path.stat().st_mode))
    expected_names = [
        "run/metrics.json",
        "run/checkpoints/best.pt",
        "run/checkpoints/last.pt",
        "run/checkpoints/step_4.pt",
        "run/hyps/test.txt",
        "run/eval/best-step*/test.greedy/attention.npz",
        "outputs/eval/best-step*/valid.greedy/hyps.txt",
        "outputs/translated.txt",
        "outputs/averaged.pt",
        "outputs/a.png",
        "sweep/report.png",
    ]
    missing = [name for name in expected_names if not fnmatch.filter(written, name)]
    assert not missing, sorted(written)
    wrong = {name: mode for name, mode in written.items() if mode != oct(0o666 & ~umask)}
    assert not wrong, f"umask {oct(umask)}: {wrong}"


def test_the_data_cache_has_the_umask_modes(
    umask: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokenized splits (prepared/) and sentencepiece models (spm/) are shared between runs."""
    from attnseq.data.prepare import prepare_data

    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    lines = [
        f"{words[i % 8]} {words[i * 3 % 8]}\t{words[i * 5 % 8]} {words[i % 8]}" for i in range(60)
    ]
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    cfg = tiny_config(*local_tsv(tmp_path, "words", "sentencepiece"), "data.spm_vocab_size=40")
    prepare_data(cfg.data, cfg.seed)
    cached = modes(tmp_path / "cache")
    assert any(name.startswith("prepared/") for name in cached), sorted(cached)
    assert any(name.startswith("spm/") for name in cached), sorted(cached)
    # A prepared entry is written once: its files are read-only, readable as the umask allows.
    expected = {name: 0o444 if name.startswith("prepared/") else 0o666 for name in cached}
    wrong = {name: mode for name, mode in cached.items() if mode != oct(expected[name] & ~umask)}
    assert not wrong, wrong
    folders = [path for path in (tmp_path / "cache").rglob("*") if path.is_dir()]
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask for path in folders)


@pytest.mark.slow  # a whole training in a subprocess
def test_a_hydra_run_is_readable_under_umask_022(tmp_path: Path) -> None:
    """`attnseq train` from a shell with umask 022: Hydra's files, train.log, TensorBoard
    events and attnseq's own files are all 0644."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "attnseq",
        "train",
        "data.train_size=100",
        "data.valid_size=10",
        "data.test_size=10",
        "model.hidden=16",
        "model.emb_dim=8",
        "trainer.max_steps=3",
        "trainer.device=cpu",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "ATTNSEQ_CACHE": str(tmp_path / "cache")}
    shell = f"umask 022; exec {' '.join(map(repr, command))}"
    done = subprocess.run(
        ["sh", "-c", shell], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    written = modes(run_dir)
    assert {"metrics.json", "train.log", ".hydra/config.yaml", "checkpoints/last.pt"} <= set(
        written
    )
    assert any(name.startswith("tb/") for name in written)
    wrong = {name: mode for name, mode in written.items() if mode != "0o644"}
    assert not wrong, wrong
