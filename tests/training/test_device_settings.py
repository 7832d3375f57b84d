"""The GPU-facing settings of a run, checked where a CPU can check them: TF32 is set for the run,
the log says which attention kernel trains, metrics.json carries the peak GPU memory on CUDA,
and an LSTM in fp16 is refused first where the CPU has no kernel for it. How the training loop
runs out of memory and reads its numbers: tests/training/test_trainer.py."""

import logging
import math
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.attention.full import fused_kernel
from attnseq.errors import UserError
from attnseq.training.precision import attention_kernels, peak_gpu_memory, use_tf32
from attnseq.training.run import run_training


@pytest.fixture
def tf32_restored():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def test_tf32_is_set_for_the_run_and_said_useless_off_cuda(tf32_restored, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        use_tf32(True, torch.device("cpu"))
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert "trainer.tf32=true has no effect on cpu" in caplog.text
    use_tf32(False, torch.device("cpu"))
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_the_fused_kernel_is_torchs_choice_for_the_inputs() -> None:
    q = torch.randn(2, 2, 5, 8)  # (B, H, T, d_k)
    padded = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    # torch's CPU flash kernel takes masks, but not dropout together with one
    assert fused_kernel(q, q, q, None, 0.0) == "flash"
    assert fused_kernel(q, q, q, padded, 0.0) == "flash"
    assert fused_kernel(q, q, q, padded, 0.1) == "math"


@pytest.mark.slow
def test_the_log_names_the_attention_kernel(tmp_path: Path, caplog) -> None:
    cfg = tiny_config("model.family=transformer", "model.attention_dropout=0.1")
    assert attention_kernels(cfg, torch.device("cpu")).startswith("math (padded), math (causal")
    with caplog.at_level(logging.INFO, logger="attnseq"):
        run_training(tiny_config("model.family=transformer", "trainer.max_steps=1"), tmp_path)
    assert "attention kernel in training: flash (padded), flash (causal, padded)" in caplog.text


def test_peak_gpu_memory_is_reported_on_cuda_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert peak_gpu_memory(torch.device("cpu")) == {}
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**20)
    assert peak_gpu_memory(torch.device("cuda", 0)) == {"peak_gpu_memory_mib": 3.0}


def test_an_lstm_in_fp16_on_a_cpu_without_its_kernels_is_refused_first(tmp_path: Path) -> None:
    cfg = tiny_config("model.rnn.cell=lstm", "trainer.precision=fp16")
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            torch.nn.LSTM(1, 1)(torch.zeros(1, 1, 1))
    except RuntimeError:
        with pytest.raises(UserError, match="torch has no float16 LSTM for this CPU"):
            run_training(cfg, tmp_path)
        assert not (tmp_path / "checkpoints").exists()
    else:
        assert math.isfinite(run_training(cfg, tmp_path)["test/loss"])
