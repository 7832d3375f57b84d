"""`torchrun ... -m attnseq train` on the device under test.

attnseq joins a process group only for WORLD_SIZE > 1 (training/distributed.py): a single
process trains exactly as without torchrun. So one GPU checks the launch (torchrun's
environment, the device of LOCAL_RANK, rank 0 writing the run) but neither NCCL nor the DDP
wrapper; those need two ranks, and NCCL refuses two ranks on one GPU ("Duplicate GPU detected"),
so the NCCL test runs where there are at least two CUDA devices and skips elsewhere. The
CPU/gloo version of the data-parallel checks is tests/training/test_distributed.py.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnseq.io.checkpoint import load_checkpoint

pytestmark = pytest.mark.gpu

# 200 reversal pairs in batches of 100 tokens: 18 batches an epoch, enough for two ranks.
TRAIN = [
    "data.name=reverse",
    "data.tokenizer=word",
    "data.train_size=200",
    "data.max_tokens=100",
    "data.valid_size=10",
    "data.test_size=10",
    "model.dropout=0.0",
    "trainer.max_steps=6",
    "trainer.validate_every=6",
    "trainer.num_heatmaps=0",
    "trainer.threads=1",
    "trainer.progress=false",
    "logger=[]",
]


def torchrun(tmp_path: Path, processes: int, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=N -m attnseq train ARGS` from tmp_path."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={processes}",
        "-m",
        "attnseq",
        "train",
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_one_process_through_torchrun(device: torch.device, tmp_path: Path) -> None:
    run = tmp_path / "run"
    torchrun(tmp_path, 1, *TRAIN, f"trainer.device={device}", f"hydra.run.dir={run}")
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 6 and last["progress"]["world_size"] == 1
    log = (run / "train.log").read_text()
    assert f"device: {device}" in log, log


def test_two_ranks_over_nccl(cuda_device: torch.device, tmp_path: Path) -> None:
    """Two ranks, one GPU each: NCCL, DDP, each rank on its own share of the batches."""
    if torch.cuda.device_count() < 2:
        pytest.skip(
            f"needs two CUDA devices (NCCL refuses two ranks on one GPU); this machine has "
            f"{torch.cuda.device_count()}"
        )
    run = tmp_path / "run"
    torchrun(tmp_path, 2, *TRAIN, "trainer.device=cuda", f"hydra.run.dir={run}")
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["progress"]["step"] == 6 and last["progress"]["world_size"] == 2
    assert len(last["rng_ranks"]) == 2
    assert "on each of 2 processes" in (run / "train.log").read_text()
