"""What attnseq guarantees when a run dies or is fed bad input.

- A run killed with SIGKILL at any moment and resumed with resume=auto ends with the same
  weights as a run that never stopped (CPU, one thread).
- SIGTERM/SIGINT finish the step, write last.pt and print the command that resumes the run;
  in `attnseq.train` they raise a KeyboardInterrupt that carries the call that resumes it.
- A kill during a checkpoint write leaves the previous checkpoint loadable.
- Non-finite losses are skipped and counted; too many in a row stop the run (exit status 1)
  without overwriting the last good checkpoint.
- Every bad input ends with exit status 2, one message naming the problem and no traceback.

Kills and signals need a process of their own: those runs are `attnseq train` subprocesses.
The refusals run `attnseq train` in this process (helpers.attnseq_in_process), eval/translate
through Typer's CliRunner.
"""

import gzip
import os
import pickle
import re
import shlex
import signal
import subprocess
import sys
import time
from itertools import count
from pathlib import Path

import pytest
import torch
from helpers import TINY, attnseq_in_process, checkpoint_step, start, tiny_config, wait_for_step
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.conversion import config_from_dict
from attnseq.config.schema import TrainConfig, register_configs
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write, remove_stale_temporaries
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models import objective as loss_module
from attnseq.training.resume import find_resume_point
from attnseq.training.run import run_training
from attnseq.training.stopping import StopSignals, TrainingDiverged, TrainingInterrupted

# A run of 40 short steps that saves a resume point after every one, with dropout so that a
# wrongly restored RNG changes the weights. 2 batches per epoch: several epoch boundaries.
TRAIN = [
    "data.train_size=200",
    "data.valid_size=10",
    "data.test_size=10",
    "model.hidden=16",
    "model.emb_dim=8",
    "model.dropout=0.3",
    "trainer.max_steps=40",
    "trainer.max_epochs=100",
    "trainer.validate_every=7",
    "trainer.early_stopping_patience=0",
    "trainer.num_heatmaps=1",
    "trainer.save_every_steps=1",
    "trainer.device=cpu",
    "trainer.threads=1",
]
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


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = load_checkpoint(a), load_checkpoint(b)
    assert first["progress"]["step"] == second["progress"]["step"]
    torch.testing.assert_close(first["model"], second["model"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(first["optimizer"]["state"], second["optimizer"]["state"])


def local_corpus(folder: Path) -> list[str]:
    """Generated dates written as parallel files (200 training pairs, 10 valid, 10 test) and
    the overrides that train on them: a corpus read from the memory-mapped Arrow cache."""
    from attnseq.data.generated import make_splits

    folder.mkdir()
    splits = make_splits("dates", {"train": 200, "valid": 10, "test": 10}, seed=1)
    for name, pairs in splits.items():
        for side, lang in ((0, "src"), (1, "tgt")):
            lines = "".join(pair[side] + "\n" for pair in pairs)
            (folder / f"{name}.{lang}").write_text(lines, encoding="utf-8")
    return [
        "data.source=local",
        "data.format=parallel",
        "data.tokenizer=char",
        f"data.root={folder}",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        "+data.splits.train=train",
        "+data.splits.valid=valid",
        "+data.splits.test=test",
    ]


# ------------------------------------------------------------------------ kill and resume
@pytest.mark.parametrize("corpus", [pytest.param("generated", marks=pytest.mark.slow), "mapped"])
def test_killed_and_resumed_run_ends_with_the_same_weights(
    corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL at step >= 3, then resume=auto and SIGTERM at >= 12, then the command the
    SIGTERM printed, run to the end: the final weights equal an uninterrupted run's. Both for a
    generated task (examples in memory) and for local files, whose examples every run reads
    from the memory-mapped Arrow cache."""
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.pt"
    data = local_corpus(tmp_path / "data") if corpus == "mapped" else []
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    args = [*TRAIN, *data, f"hydra.run.dir={run_dir}"]

    process = start(["train", *args], tmp_path)
    killed_at = wait_for_step(process, last, 3)
    process.kill()
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert checkpoint_step(last) >= killed_at  # whole, loadable, at least where we saw it

    process = start(["train", "resume=auto", *args], tmp_path)
    wait_for_step(process, last, 12)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "Traceback" not in err
    stopped_at = checkpoint_step(last)
    assert f"{last} (step {stopped_at}) is saved" in err
    command = err.split("Resume with:\n", 1)[1].strip().splitlines()[0]
    assert command.startswith("attnseq train resume=auto hydra.run.dir=")

    # exactly the printed command, to the end (in this process: nothing more is killed)
    finished = attnseq_in_process(*shlex.split(command)[1:], cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert checkpoint_step(last) == 40
    assert not list(last.parent.glob(".*.tmp"))  # a killed write's leftovers are cleaned up
    train_log = (run_dir / "train.log").read_text()
    assert train_log.count("resuming from") == 2
    if corpus == "mapped":
        assert "loaded from cache" in train_log

    # The uninterrupted run, with the config the subprocesses composed (from the checkpoint).
    cfg = config_from_dict(load_checkpoint(last)["config"])
    reference = tmp_path / "reference"
    run_training(cfg, reference)
    assert_same_weights(last, reference / "checkpoints" / "last.pt")
    assert_same_weights(run_dir / "checkpoints" / "best.pt", reference / "checkpoints" / "best.pt")


def test_resuming_in_process_continues_schedule_plateau_and_rng(tmp_path: Path) -> None:
    """Stop at step 4, resume to 10: equal to 10 straight, with plateau lr cuts on the way
    (the schedule's base lrs and plateau state), dropout (RNG) and an epoch boundary inside
    the resumed part."""
    settings = [
        "model.dropout=0.3",
        "trainer.num_heatmaps=1",
        "optim.scheduler=plateau",
        "optim.plateau_patience=1",
        "trainer.validate_every=2",
        "trainer.early_stopping_metric=exact_match",  # stays 0 this early: the lr gets cut
        "trainer.early_stopping_patience=0",
        "data.max_tokens=1200",
    ]
    straight = tmp_path / "straight"
    run_training(tiny_config(*settings, "trainer.max_steps=10"), straight)
    split = tmp_path / "split"
    run_training(tiny_config(*settings, "trainer.max_steps=4"), split)
    run_training(tiny_config(*settings, "trainer.max_steps=10", "resume=auto"), split)
    assert_same_weights(straight / "checkpoints" / "last.pt", split / "checkpoints" / "last.pt")
    a = load_checkpoint(straight / "checkpoints" / "last.pt")
    b = load_checkpoint(split / "checkpoints" / "last.pt")
    assert a["scheduler"]["per_update"]["base_lrs"] == b["scheduler"]["per_update"]["base_lrs"]
    assert a["scheduler"]["plateau"] == b["scheduler"]["plateau"]
    lr = config_from_dict(a["config"]).optim.lr
    assert max(a["scheduler"]["per_update"]["base_lrs"]) < lr  # the plateau did cut the lr
    assert a["progress"]["epoch"] == b["progress"]["epoch"] >= 1


def test_resuming_a_finished_run_trains_nothing(tmp_path: Path, caplog) -> None:
    cfg = tiny_config("trainer.max_steps=4", "trainer.validate_every=2")
    first = run_training(cfg, tmp_path)
    before = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    caplog.set_level("INFO", logger="attnseq")
    again = run_training(tiny_config("trainer.max_steps=4", "resume=auto"), tmp_path)
    assert "nothing left to train" in caplog.text
    assert again == pytest.approx(first)
    after = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    torch.testing.assert_close(before["model"], after["model"])
    assert after["progress"]["validated_step"] == 4


def test_resume_from_another_run_directory_brings_best_pt(tmp_path: Path) -> None:
    run_training(tiny_config("trainer.max_steps=4", "trainer.validate_every=2"), tmp_path / "a")
    source = tmp_path / "a" / "checkpoints" / "last.pt"
    cfg = tiny_config("trainer.max_steps=6", "trainer.validate_every=2", f"resume={source}")
    metrics = run_training(cfg, tmp_path / "b")
    assert checkpoint_step(tmp_path / "b" / "checkpoints" / "last.pt") == 6
    assert (tmp_path / "b" / "checkpoints" / "best.pt").is_file()
    assert "test/bleu" in metrics
    stored = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.pt")["config"]
    assert stored["resume"] is None  # a checkpoint does not depend on where its run came from


def test_resume_auto_without_a_checkpoint_starts_fresh_and_says_so(tmp_path: Path, caplog):
    assert find_resume_point(tiny_config("resume=auto"), tmp_path) is None
    assert "no checkpoint at" in caplog.text and "starting a fresh run" in caplog.text


# ------------------------------------------------------------------------ signals
def test_sigint_finishes_the_step_and_writes_last_pt(tmp_path: Path, monkeypatch) -> None:
    """In-process: the signal arrives inside step 5's loss; the run saves step 5 and stops."""
    real_loss = loss_module.token_loss_sum
    calls = count(1)

    def loss_with_a_signal(*args, **kwargs):
        if next(calls) == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(loss_module, "token_loss_sum", loss_with_a_signal)
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as caught:
        run_training(tiny_config("trainer.max_steps=20"), tmp_path)
    assert signal.getsignal(signal.SIGINT) is previous  # handlers are restored
    assert caught.value.graceful and caught.value.step == 5
    assert caught.value.exit_status == 130
    assert checkpoint_step(tmp_path / "checkpoints" / "last.pt") == 5


def test_a_second_sigint_stops_at_once() -> None:
    with StopSignals() as stop, stop.graceful():
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        with pytest.raises(TrainingInterrupted) as caught:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode boundary
    assert not caught.value.graceful
    with StopSignals(), pytest.raises(TrainingInterrupted) as caught:  # outside the loop
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert caught.value.exit_status == 143


def test_sigint_in_attnseq_train_is_a_keyboard_interrupt_with_the_call_that_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, as above, through the Python API; then the call it names resumes the run."""
    real_loss = loss_module.token_loss_sum
    calls = count(1)

    def loss_with_a_signal(*args, **kwargs):
        if next(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(loss_module, "token_loss_sum", loss_with_a_signal)
    overrides = [*TINY, "trainer.max_steps=6", "trainer.validate_every=4", "trainer.progress=false"]
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt) as caught:
        try:
            attnseq.train(overrides, run_dir=run, verbose=False)
        except Exception:  # what a notebook's `except Exception` catches: not a Ctrl-C
            pytest.fail("the interruption was caught as an Exception")
    interruption = caught.value
    assert isinstance(interruption, TrainingInterrupted) and interruption.step == 3
    call = (
        f"attnseq.train({[*overrides, 'resume=auto']!r}, run_dir={str(run.absolute())!r}, "
        "verbose=False)"
    )
    assert interruption.resume == call
    assert str(interruption).endswith(f"Resume with:\n  {call}")
    assert f"{run.absolute() / 'checkpoints' / 'last.pt'} (step 3) is saved" in str(interruption)
    assert "hydra" not in str(interruption) and "attnseq train" not in str(interruption)
    monkeypatch.setattr(loss_module, "token_loss_sum", real_loss)
    resumed = eval(interruption.resume, {"attnseq": attnseq})  # the call, as the user copies it
    assert resumed.run_dir == run.absolute() and "test/exact_match" in resumed.metrics
    assert "resuming from" in (run / "train.log").read_text()
    assert checkpoint_step(run / "checkpoints" / "last.pt") == 6


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
