"""The GPU suite (`pytest -m gpu tests/gpu`): what attnseq computes on a CUDA device, checked
against what it computes on the CPU.

The device under test is $ATTNSEQ_TEST_DEVICE (default `cuda`; any torch device string). With
ATTNSEQ_TEST_DEVICE=cpu the suite's own code runs on the CPU (tests/conftest.py then keeps the
`gpu` tests), so the tests themselves can be checked on a machine without a GPU; the checks
that only mean something on CUDA (fused attention kernels, NCCL, CTranslate2's CUDA build) skip
there with a reason. Without a CUDA device and without the variable every test is skipped.

cuBLAS picks its reduction order per call unless its workspace is fixed, so the variable that
makes it deterministic (with `torch.use_deterministic_algorithms(True)`) is set here, before any
test of this folder initialises CUDA, and inherited by the `attnseq` processes they start.
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import TRAINED_REVERSE, built_once, tiny_config, train_quietly

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

DEVICE = os.environ.get("ATTNSEQ_TEST_DEVICE", "cuda")


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device under test."""
    return torch.device(DEVICE)


@pytest.fixture
def cuda_device(device: torch.device) -> torch.device:
    """The device under test when it is a CUDA device; skips the test otherwise."""
    if device.type != "cuda":
        pytest.skip(f"checks a CUDA-only path; the device under test is {device}")
    return device


@pytest.fixture
def deterministic_algorithms() -> Iterator[None]:
    """torch's deterministic algorithms for the test (an op without one raises), restored
    afterwards; with CUBLAS_WORKSPACE_CONFIG (set above) cuBLAS is deterministic too."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.fixture
def float32_arithmetic() -> Iterator[None]:
    """No TF32 in matmuls and cuDNN for the test (cuDNN's RNNs and convolutions use TF32 by
    default on Ampere and later: inputs rounded to a 10-bit mantissa), restored afterwards."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


# ------------------------------------------------------------------ trained reverse models
REVERSE = (*TRAINED_REVERSE, "trainer.threads=1", "logger=[]")
REVERSE_MODELS = {
    "rnn": ("model.family=rnn", "trainer.max_steps=150", "trainer.validate_every=150"),
    "transformer": (
        "model.family=transformer",
        "model.d_model=64",
        "model.ff_dim=128",
        "trainer.max_steps=300",
        "trainer.validate_every=300",
    ),
}


@dataclass(frozen=True)
class TrainedModel:
    """A trained tiny reverse model: its checkpoint and the overrides that trained it."""

    checkpoint: Path
    overrides: tuple[str, ...]


@pytest.fixture(scope="session")
def reverse_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainedModel]:
    """A GRU + Bahdanau and a transformer reverse model, trained on the CPU once per session
    (by whichever test worker asks first; about 10 s each on one core)."""
    models = {}
    for family, own in REVERSE_MODELS.items():
        overrides = (*REVERSE, *own, "trainer.device=cpu")

        def train(run_dir: Path, overrides: tuple[str, ...] = overrides) -> None:
            train_quietly(tiny_config(*overrides), run_dir)

        run_dir = built_once(tmp_path_factory, f"gpu-reverse-{family}", train)
        models[family] = TrainedModel(run_dir / "checkpoints" / "last.pt", overrides)
    return models
