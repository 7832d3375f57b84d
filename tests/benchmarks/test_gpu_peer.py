"""benchmarks/gpu_peer.py's own parts, without transformers: the split FLOP estimate of a model
laid out as Marian is, the device and precision it hands the peer's training arguments, and its
refusals. (Running the peer needs transformers, which the GPU image has: gpu_check.sh runs it.)"""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import load_script
from torch import nn

gpu_peer = load_script("benchmarks/gpu_peer.py")


class Coder(nn.Module):
    def __init__(self, shared: nn.Embedding) -> None:
        super().__init__()
        self.embed_tokens = shared
        self.embed_positions = nn.Embedding(16, 4)  # sinusoidal in Marian: a table look-up
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.layer_norm = nn.LayerNorm(4)


class TinyMarian(nn.Module):
    """Marian's parameter names: model.shared, model.encoder.*, model.decoder.*, lm_head tied
    to the shared embedding."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.Embedding(10, 4)
        self.model = nn.Module()
        self.model.shared = shared
        self.model.encoder = Coder(shared)
        self.model.decoder = Coder(shared)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = shared.weight


def test_flops_per_token_split_marian_style() -> None:
    # per side: two 4x4 layers with biases (40) and a layer norm (8); the target side also the
    # output projection (40, although tied); embeddings and positions are free
    assert gpu_peer.flops_per_token(TinyMarian()) == {"src": 6 * 48, "tgt": 6 * (48 + 40)}


@pytest.mark.parametrize(
    ("device", "precision", "expected"),
    [
        ("cuda", "bf16", {"use_cpu": False, "bf16": True, "fp16": False}),
        ("cuda", "fp32", {"use_cpu": False, "bf16": False, "fp16": False}),
        ("cpu", "fp16", {"use_cpu": True, "bf16": False, "fp16": True}),
    ],
)
def test_the_peer_arguments_get_the_device_and_precision(device, precision, expected) -> None:
    """The peer builds its arguments with use_cpu=True and no precision: those two change, the
    rest of what it passes stays."""
    peer = SimpleNamespace(Seq2SeqTrainingArguments=lambda **kwargs: kwargs)
    gpu_peer.on_device(peer, torch.device(device), precision)
    arguments = peer.Seq2SeqTrainingArguments(use_cpu=True, learning_rate=1e-3, seed=42)
    assert arguments == {"learning_rate": 1e-3, "seed": 42, **expected}


def test_refusals_name_the_problem(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        gpu_peer.main([str(tmp_path), str(tmp_path), str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "hf_seq2seq.py not found (benchmarks/gpu_prepare.sh makes it)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_peer.main([str(tmp_path), str(tmp_path), str(tmp_path), "--precisions", "fp8"])
    assert "--precisions takes fp32, bf16 and fp16" in capsys.readouterr().err
