"""Resuming a run (attnseq/training/resume.py): a run killed with SIGKILL at any moment and
resumed with resume=auto ends with the same weights as a run that never stopped (CPU, one
thread); in process, the schedule, the plateau and the random numbers continue; a finished run
trains nothing; a resume from another run directory brings its best.pt; resume=auto without a
checkpoint starts afresh and says so. Kills need a process of their own: those runs are
`attnseq train` subprocesses."""

import shlex
import signal
from pathlib import Path

import pytest
import torch
from helpers import attnseq_in_process, checkpoint_step, start, tiny_config, wait_for_step

from attnseq.config.conversion import config_from_dict
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.resume import find_resume_point
from attnseq.training.run import run_training

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


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["generated", "mapped"])
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


@pytest.mark.slow
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


@pytest.mark.slow
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
