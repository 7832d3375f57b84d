"""The GPU-facing settings of a run, checked where a CPU can check them: TF32 is set for the run,
the log says which attention kernel trains, metrics.json carries the peak GPU memory on CUDA,
and running out of device memory is one line with the batch that failed while last.pt stays."""

import logging
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

from attnseq.attention.full import fused_kernel
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training import trainer as trainer_module
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


def test_out_of_memory_is_one_line_and_last_pt_stays(tmp_path: Path, monkeypatch) -> None:
    real_step = trainer_module.train_step
    calls = []

    def step(parts, micro_batches, number):
        calls.append(number)
        if len(calls) == 4:  # after the validation at step 3 wrote last.pt
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(parts, micro_batches, number)

    monkeypatch.setattr(trainer_module, "train_step", step)
    with pytest.raises(UserError) as refusal:
        run_training(tiny_config("data.max_tokens=200"), tmp_path)
    message = str(refusal.value)
    assert message.startswith("out of cpu memory in update 4, on a batch of ")
    assert "under data.max_tokens=200: lower data.max_tokens" in message
    assert message.endswith("last.pt (step 3) is kept") and "\n" not in message
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["progress"]["step"] == 3
