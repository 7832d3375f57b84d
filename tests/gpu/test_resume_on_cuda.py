"""Resume on the device under test: a run killed with SIGKILL and continued with resume=auto
ends with the weights of a run that never stopped.

On the CPU that holds with one thread (tests/training/test_faults.py). On CUDA several kernels
(cuBLAS reductions, index and scatter backward passes) may sum in another order on every call,
so two uninterrupted runs need not agree either; attnseq has no setting of its own for that,
so every process of this test runs with torch's deterministic algorithms
(`torch.use_deterministic_algorithms(True)`, CUBLAS_WORKSPACE_CONFIG from tests/gpu/conftest.py).
Dropout is on: the device's generator state must come back from the checkpoint too.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import attnseq_in_process, checkpoint_step

from attnseq.config.conversion import config_from_dict
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.run import run_training

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("deterministic_algorithms")]

STEPS = 60
# `attnseq train` with torch's deterministic algorithms on (the test's own process turns them
# on with the deterministic_algorithms fixture)
DETERMINISTIC_ATTNSEQ = (
    "import torch; torch.use_deterministic_algorithms(True); "
    "from attnseq.cli.app import main; main()"
)


def train_args(device: torch.device, run_dir: Path) -> list[str]:
    """A tiny GRU + Bahdanau run with dropout that saves a resume point after every update."""
    return [
        "data.train_size=200",
        "data.valid_size=10",
        "data.test_size=10",
        "model.hidden=16",
        "model.emb_dim=8",
        "model.dropout=0.3",
        f"trainer.max_steps={STEPS}",
        "trainer.max_epochs=100",
        "trainer.validate_every=20",
        "trainer.early_stopping_patience=0",
        "trainer.num_heatmaps=0",
        "trainer.save_every_steps=1",
        "trainer.threads=1",
        "trainer.progress=false",
        f"trainer.device={device}",
        "logger=[]",
        f"hydra.run.dir={run_dir}",
    ]


def test_killed_and_resumed_run_ends_with_the_same_weights(
    device: torch.device, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.pt"
    args = train_args(device, run_dir)
    process = subprocess.Popen(
        [sys.executable, "-c", DETERMINISTIC_ATTNSEQ, "train", *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while (checkpoint_step(last) or 0) < 3:
        if process.poll() is not None:
            pytest.fail(f"training ended (status {process.returncode}):\n{process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("no checkpoint of step 3 within 240 s")
        time.sleep(0.01)
    process.kill()
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    killed_at = checkpoint_step(last)
    assert killed_at is not None and 3 <= killed_at < STEPS  # killed in the middle of the run

    resumed = attnseq_in_process("train", "resume=auto", *args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert checkpoint_step(last) == STEPS
    assert "resuming from" in (run_dir / "train.log").read_text()

    # the uninterrupted run, with the config the killed process composed
    reference = tmp_path / "reference"
    run_training(config_from_dict(load_checkpoint(last)["config"]), reference)
    ours, theirs = load_checkpoint(last), load_checkpoint(reference / "checkpoints" / "last.pt")
    assert ours["progress"]["step"] == theirs["progress"]["step"] == STEPS
    torch.testing.assert_close(ours["model"], theirs["model"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours["optimizer"]["state"], theirs["optimizer"]["state"])
