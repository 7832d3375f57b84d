"""What attnseq guarantees when a run dies or is fed bad input (a run killed and resumed:
tests/training/test_resume.py; signals: tests/training/test_stopping.py).

- A kill during a checkpoint write leaves the previous checkpoint loadable.
- Non-finite losses are skipped and counted; too many in a row stop the run (exit status 1)
  without overwriting the last good checkpoint.
- Every bad input ends with exit status 2, one message naming the problem and no traceback.

A kill needs a process of its own. The refusals run `attnseq train` in this process
(helpers.attnseq_in_process), eval/translate through Typer's CliRunner.
"""

import gzip
import pickle
import re
import signal
import subprocess
import sys
from itertools import count
from pathlib import Path

import pytest
import torch
from helpers import attnseq_in_process, checkpoint_step, tiny_config
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.schema import TrainConfig, register_configs
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write, remove_stale_temporaries
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models import objective as loss_module
from attnseq.training.resume import find_resume_point
from attnseq.training.run import run_training
from attnseq.training.stopping import TrainingDiverged, TrainingInterrupted

# Fails fast: what the bad-input runs share.
QUICK = [
    "data.train_size=50",
    "data.valid_size=5",
    "data.test_size=5",
    "model.hidden=16",
    "model.emb_dim=8",
    "trainer.max_steps=2",
    "trainer.device=cpu",
    "trainer.threads=1",
]


def compose_train(overrides: list[str]) -> TrainConfig:
    """The config `attnseq train OVERRIDES` runs with."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("train", overrides=overrides))
    assert isinstance(cfg, TrainConfig)
    return cfg


# ------------------------------------------------------------------------ interrupted writes
KILLED_WRITER = """
import sys, time
from attnseq.io.atomic import atomic_write
data = open(sys.argv[2], "rb").read()
def write(handle):
    handle.write(data[: len(data) // 2])
    handle.flush()
    print("writing", flush=True)
    time.sleep(120)
atomic_write(sys.argv[1], write)
"""


def test_a_kill_during_a_checkpoint_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    target = folder / "last.pt"
    save_checkpoint(target, {"model": {"w": torch.zeros(3)}, "progress": {"step": 1}})
    save_checkpoint(tmp_path / "new.pt", {"model": {"w": torch.ones(10_000)}})
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(target), str(tmp_path / "new.pt")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    writer.kill()
    writer.wait()
    assert load_checkpoint(target)["progress"] == {"step": 1}
    leftovers = list(folder.glob(".*.tmp"))
    assert len(leftovers) == 1  # SIGKILL runs no cleanup: the next run removes it
    assert remove_stale_temporaries(folder) == leftovers
    assert [p.name for p in folder.iterdir()] == ["last.pt"]


def test_an_exception_during_a_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "metrics.json"
    target.write_text("old\n")

    def interrupted(handle) -> None:
        handle.write(b"half of the n")
        raise TrainingInterrupted(signal.SIGINT, graceful=False)  # what a 2nd Ctrl-C raises

    with pytest.raises(TrainingInterrupted):
        atomic_write(target, interrupted)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


# ------------------------------------------------------------------------ non-finite losses
def nan_from_call(first_bad: int, last_bad: int | None = None):
    """A training token_loss_sum that returns NaN for its calls first_bad..last_bad
    (1-based)."""
    real_loss = loss_module.token_loss_sum
    calls = count(1)

    def loss(*args, **kwargs):
        loss_sum = real_loss(*args, **kwargs)
        call = next(calls)
        if call >= first_bad and (last_bad is None or call <= last_bad):
            loss_sum = loss_sum * float("nan")
        return loss_sum

    return loss


class _NanGradient(torch.autograd.Function):
    """Identity forward, NaN gradient: a finite loss whose backward pass is not finite."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


@pytest.mark.slow
def test_nonfinite_losses_and_gradients_are_skipped_and_counted(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """Calls 3 and 4 give a NaN loss, call 6 a NaN gradient: 6 updates, 3 of them skipped."""
    bad_loss = nan_from_call(3, 4)
    calls = count(1)

    def loss(*args, **kwargs):
        call = next(calls)
        loss_sum = bad_loss(*args, **kwargs)
        return _NanGradient.apply(loss_sum) if call == 6 else loss_sum

    monkeypatch.setattr(loss_module, "token_loss_sum", loss)
    run_training(tiny_config("trainer.max_steps=6", "trainer.validate_every=3"), tmp_path)
    payload = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    progress = payload["progress"]
    assert progress["step"] == 6
    assert progress["skipped_steps"] == 3 and progress["nonfinite_in_a_row"] == 1
    # Adam counted only the applied updates: its skip happens on the device
    assert {float(state["step"]) for state in payload["optimizer"]["state"].values()} == {3.0}
    assert "non-finite loss nan; update skipped (2 in a row" in caplog.text
    assert "non-finite gradient norm nan" in caplog.text
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/skipped_steps")] == [1, 2, 3]


@pytest.mark.slow
def test_too_many_nonfinite_losses_stop_and_keep_the_last_good_checkpoint(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(loss_module, "token_loss_sum", nan_from_call(5))
    cfg = tiny_config(
        "trainer.max_steps=50",
        "trainer.validate_every=2",
        "trainer.save_every_steps=1",
        "trainer.max_nonfinite_steps=3",
    )
    with pytest.raises(TrainingDiverged, match=r"3 non-finite losses or gradients in a row"):
        run_training(cfg, tmp_path)
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    # the validation at step 6 wrote last.pt within the streak: the weights of step 4, which
    # the two skipped updates left as they were (Adam applied 4 updates)
    assert last["progress"]["step"] == 6 and last["progress"]["skipped_steps"] == 2
    assert {float(s["step"]) for s in last["optimizer"]["state"].values()} == {4.0}
    assert all(torch.isfinite(t).all() for t in last["model"].values())
    assert load_checkpoint(tmp_path / "checkpoints" / "best.pt")["progress"]["step"] <= 6
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_a_diverged_run_exits_1_with_a_message(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(loss_module, "token_loss_sum", nan_from_call(4))
    run_dir = tmp_path / "run"
    result = attnseq_in_process(
        "train",
        *QUICK,
        "trainer.max_steps=30",
        "trainer.save_every_steps=1",
        "trainer.max_nonfinite_steps=4",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: training diverged: 4 non-finite")
    assert "Traceback" not in result.stderr
    assert "last.pt is from step 3" in result.stderr
    assert checkpoint_step(run_dir / "checkpoints" / "last.pt") == 3


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("model.hiden=3", "unknown config key 'model.hiden'"),
        ("trainer.max_steps=abc", "trainer.max_steps"),
        ("model.rnn.cell=foo", "expected one of [gru, lstm]"),
        ("resume=missing/last.pt", "resume=missing/last.pt: no such file"),
        ("trainer.save_every_steps=0", "trainer.save_every_steps must be >= 1"),
    ],
)
def test_bad_train_arguments_exit_2_before_a_run_directory_exists(
    argument: str, message: str, tmp_path: Path
) -> None:
    result = attnseq_in_process("train", argument, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:") and message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs").exists()


def _local_data(root: Path, case: str) -> list[str]:
    """Overrides for Multi30k-style local parallel files (data=multi30k), broken as `case`
    says."""
    folder = root / "multi30k"
    folder.mkdir(parents=True)
    lines = [f"satz {i}" for i in range(30)]
    for split in ["train", "val", "test_2016_flickr"]:
        (folder / f"{split}.de").write_text("\n".join(lines) + "\n")
        (folder / f"{split}.en").write_text("\n".join(reversed(lines)) + "\n")
    if case == "missing":
        (folder / "val.en").unlink()
    elif case == "mismatched":
        (folder / "train.en").write_text("\n".join(lines[:-3]) + "\n")
    elif case == "utf8":
        (folder / "train.de").write_bytes(b"gut\nkaputt \xff\xfe\n" + b"x\n" * 28)
    elif case == "truncated_gzip":
        whole = gzip.compress((folder / "train.de").read_bytes() * 200)
        (folder / "train.de").unlink()
        (folder / "train.de.gz").write_bytes(whole[: len(whole) // 2])
    overrides = ["data=multi30k", f"data.root={root}", "data.tokenizer=word"]
    if case == "no_match":
        overrides.append("data.splits.train=multi30k/shard-*")
    return overrides


DATA_PROBLEMS = {
    "missing": "val.en; expected parallel text files",
    "mismatched": "parallel files differ in length",
    "utf8": "line 2 is not valid UTF-8",
    "no_match": "no data file matches",
    "truncated_gzip": "train.de.gz after line",
}


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        pytest.param("mismatched", marks=pytest.mark.slow),  # in-process below
        pytest.param("utf8", marks=pytest.mark.slow),
        "no_match",
        pytest.param("truncated_gzip", marks=pytest.mark.slow),
    ],
)
def test_bad_data_files_exit_2(case: str, tmp_path: Path) -> None:
    message = DATA_PROBLEMS[case]
    overrides = _local_data(tmp_path / "data", case)
    result = attnseq_in_process(
        "train",
        *overrides,
        *QUICK,
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        env={"ATTNSEQ_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:") and message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("case", ["mismatched", "utf8", "no_match", "truncated_gzip"])
def test_bad_data_files_are_user_errors(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same problems in-process (fast); the CLI maps every UserError to exit status 2."""
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    cfg = compose_train([*_local_data(tmp_path / "data", case), *QUICK])
    with pytest.raises(UserError, match=re.escape(DATA_PROBLEMS[case])):
        run_training(cfg, tmp_path / "run")


class _Payload:
    """Unpickling this object would create a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def cli_checkpoint(tmp_path_factory) -> Path:
    """last.pt of a run with QUICK's config as `attnseq train` composes it (in-process)."""
    run_dir = tmp_path_factory.mktemp("cli_run")
    run_training(compose_train(QUICK), run_dir)
    return run_dir / "checkpoints" / "last.pt"


def _bad_checkpoints(folder: Path, good: Path) -> dict[str, tuple[Path, str]]:
    """{case: (file, expected message)} of files `resume=`, `eval` and `translate` refuse."""
    text = folder / "notes.pt"
    text.write_text("not a checkpoint\n")
    data = good.read_bytes()
    truncated = folder / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    evil = folder / "evil.pt"
    torch.save(
        {"format": "attnseq-checkpoint", "version": 1, "x": _Payload(folder / "pwned")}, evil
    )
    raw = folder / "raw.pt"
    raw.write_bytes(pickle.dumps(_Payload(folder / "pwned")))
    weights_only = folder / "weights_only.pt"
    payload = load_checkpoint(good)
    save_checkpoint(weights_only, {k: payload[k] for k in ("config", "tokenizers", "model")})
    return {
        "text": (text, str(text)),
        "truncated": (truncated, "truncated"),
        "malicious": (evil, "could run code; nothing was run"),
        "raw pickle": (raw, str(raw)),
        "no training state": (weights_only, "holds no optimizer, scheduler, progress, rng"),
    }


@pytest.mark.slow
def test_resume_from_a_file_that_is_no_checkpoint_exits_2(
    cli_checkpoint: Path, tmp_path: Path
) -> None:
    """Through the CLI for one kind of bad file (a missing one fails in the pre-flight check,
    see above); the other kinds take the same path, and are checked in-process below."""
    path, message = _bad_checkpoints(tmp_path, cli_checkpoint)["text"]
    result = attnseq_in_process(
        "train", *QUICK, f"resume={path}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_resume_with_different_model_settings_names_the_keys(
    cli_checkpoint: Path, tmp_path: Path
) -> None:
    result = attnseq_in_process(
        "train",
        *QUICK,
        "model.hidden=64",
        "seed=7",
        "trainer.max_steps=5",  # trainer.* may change: not named
        f"resume={cli_checkpoint}",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "cannot resume from" in result.stderr
    assert "model.hidden: checkpoint 16, now 64" in result.stderr
    assert "seed: checkpoint 1, now 7" in result.stderr
    assert "trainer.max_steps" not in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_checkpoints_for_eval_and_translate_exit_2(cli_checkpoint: Path, tmp_path: Path):
    runner = CliRunner()
    cases = _bad_checkpoints(tmp_path, cli_checkpoint)
    cases["missing"] = (tmp_path / "missing.pt", "checkpoint not found")
    for case, (path, message) in cases.items():
        if case == "no training state":
            continue  # eval/translate need weights only: such a file is fine there
        for command in (["eval", str(path)], ["translate", str(path)]):
            result = runner.invoke(app, command, input="a b\n")
            assert result.exit_code == 2, (case, command, result.output)
            assert message in result.output, (case, command, result.output)
    assert not (tmp_path / "pwned").exists()


def test_translate_input_problems_exit_2(cli_checkpoint: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe\n")
    result = runner.invoke(app, ["translate", str(cli_checkpoint), "--input", str(bad)])
    assert result.exit_code == 2 and "not UTF-8" in result.output
    result = runner.invoke(app, ["translate", str(cli_checkpoint)], input="")
    assert result.exit_code == 2 and "no input" in result.output


@pytest.mark.slow
def test_resume_points_loaded_in_process_name_their_problem(
    cli_checkpoint: Path, tmp_path: Path
) -> None:
    cfg = compose_train([*QUICK, "model.emb_dim=48"])
    cfg.resume = str(cli_checkpoint)
    with pytest.raises(UserError, match=r"model.emb_dim: checkpoint 8, now 48"):
        find_resume_point(cfg, tmp_path)
    cases = _bad_checkpoints(tmp_path, cli_checkpoint)
    for case in ["truncated", "malicious", "raw pickle", "no training state"]:
        path, message = cases[case]
        cfg.resume = str(path)
        with pytest.raises(UserError, match=re.escape(message)):
            find_resume_point(cfg, tmp_path)
    assert not (tmp_path / "pwned").exists()
    cfg = compose_train([*QUICK, "trainer.max_steps=9"])
    cfg.resume = str(cli_checkpoint)
    point = find_resume_point(cfg, tmp_path)
    assert point is not None and point.step == 2
