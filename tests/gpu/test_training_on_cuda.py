"""Training on the device under test (tests/gpu/conftest.py): every model family and attention
kind (a covering choice of tests/model_variants.py), in float32, bfloat16 and float16, and the
compiled training path.

Each variant trains 20 updates through `run_training` (the same code as `attnseq train`: the
batches collated and moved to the device, autocast and loss scaling, validation and the test
decoding at the end on the device) with finite losses, and its first loss equals the CPU's
first loss: the model is built on the CPU from the same seed and moved, the batches are a
function of the seed alone, and dropout is off, so both compute the loss of the same weights on
the same batch. The tolerances, relative:

    fp32  1e-3  float32 arithmetic on both (TF32 stays off unless trainer.tf32=true); other
                kernels sum in other orders, which moves the loss by ~1e-6. A wrong mask or a
                dropped term moves it by far more than the margin.
    fp16  5e-3  autocast rounds matmul inputs and outputs to float16 (11-bit significand,
                unit roundoff 2^-11 = 4.9e-4) through every layer; the CPU reference is float32.
    bf16  2e-2  the same with bfloat16 (8-bit significand, unit roundoff 2^-8 = 3.9e-3).

Hard attention samples its positions from the device's generator in training, so the CPU and
the device draw differently; for those the comparison is of the evaluation-mode loss (argmax
positions, no sampling) of the same first batch, under the same autocast.
"""

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_config
from model_variants import SETTINGS, VARIANTS

from attnseq.config.choices import (
    AttentionKind,
    AttentionValues,
    DecoderStyle,
    HardMode,
    Hierarchy,
    ModelFamily,
    Precision,
    RNNCell,
    Score,
    SparsePattern,
    Window,
)
from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError
from attnseq.training import trainer as trainer_module
from attnseq.training.run import run_training

pytestmark = pytest.mark.gpu

UPDATES = 20
# What every variant shares: a tiny model, 20 updates, validation only at the end, 8 test
# sentences, no dropout, no tracker.
TRAIN = (
    "model.dropout=0.0",
    "data.valid_size=8",
    "data.test_size=8",
    f"trainer.max_steps={UPDATES}",
    f"trainer.validate_every={UPDATES}",
    "trainer.threads=1",
    "logger=[]",
)


# Variants of tests/model_variants.py that hold every family, decoder, cell, RNN score, window,
# attention values, hierarchy, hard attention mode, top-k, pointer-generator and transformer
# self-attention kind (causal ones also in the decoder) and pattern, memory and convolution at
# least once: a third of them, so that three precisions fit the suite's minutes.
GPU_VARIANTS = [
    *(f"rnn-bahdanau-{score.name}-global" for score in Score),
    *(f"rnn-luong-general-{window.name}" for window in Window),
    "rnn-lstm-2-layers",
    "rnn-bahdanau-values-embeddings",
    "rnn-luong-hierarchy-sentence",
    "rnn-bahdanau-hard-gumbel-top1",
    "rnn-luong-hard-reinforce-top2",
    "transformer-hard-gumbel-top2",
    "rnn-luong-copy-coverage",
    "transformer-copy-coverage",
    *(
        f"transformer-{kind.name}{'-decoder-self' * kind.causal}"
        for kind in AttentionKind
        if kind is not AttentionKind.strided
    ),
    *(f"transformer-strided-{pattern.name}-pattern" for pattern in SparsePattern),
    "transformer-memory",
    "transformer-convolution",
]


def variant_config(name: str, *overrides: str) -> TrainConfig:
    """Variant `name` of model_variants.py with `overrides`; skips the test with validation's
    message when the config refuses the combination."""
    try:
        return tiny_config(*SETTINGS, *VARIANTS[name], *overrides)
    except UserError as refusal:
        pytest.skip(f"the config refuses {name}: {refusal}")


PRECISIONS = {"fp32": "32", "bf16": "bf16", "fp16": "fp16"}  # name -> trainer.precision value
TOLERANCE = {"fp32": 1e-3, "fp16": 5e-3, "bf16": 2e-2}  # relative; module docstring says why
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def test_the_variants_cover_every_enum_member() -> None:
    """Every member of every Enum that picks a model class or an attention computation is in
    a variant here that the config accepts, and the precisions are the config's."""
    assert set(GPU_VARIANTS) <= set(VARIANTS)
    accepted = [variant_config(name) for name in GPU_VARIANTS]  # skips on a refusal
    settings = [
        (
            cfg.model.family,
            cfg.model.decoder,
            cfg.model.rnn.cell,
            cfg.model.attention.score,
            cfg.model.attention.window,
            cfg.model.attention.values,
            cfg.model.attention.hierarchy,
            cfg.model.attention.hard,
            cfg.model.attention.kind,
            cfg.model.attention.pattern,
        )
        for cfg in accepted
    ]
    found = {member for row in settings for member in row}
    enums = (ModelFamily, DecoderStyle, RNNCell, Score, Window, AttentionValues, Hierarchy)
    for enum in (*enums, HardMode, AttentionKind, SparsePattern):
        assert set(enum) <= found, enum
    assert any(cfg.model.copy for cfg in accepted) and any(cfg.model.coverage for cfg in accepted)
    assert sorted(PRECISIONS) == sorted(member.name for member in Precision)


@dataclass
class Recorded:
    """What one training run did, update by update."""

    first_batch: list[int] = field(default_factory=list)  # example indices of update 1
    losses: list[float] = field(default_factory=list)
    applied: list[bool] = field(default_factory=list)
    eval_loss: float | None = None  # evaluation-mode loss of update 1's batch, before it
    seconds: float = 0.0


def evaluation_loss(model: torch.nn.Module, batch, precision: str) -> float:
    """Cross entropy per target token of `batch` in evaluation mode (no dropout, hard
    attention takes its argmax), under the run's autocast; the model goes back to training."""
    dtype = AUTOCAST.get(precision)
    model.eval()
    with (
        torch.no_grad(),
        torch.autocast(batch.src.device.type, dtype=dtype, enabled=dtype is not None),
    ):
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
    model.train()
    return F.cross_entropy(
        logits.float().flatten(0, 1), batch.tgt_out.flatten(), ignore_index=model.pad_id
    ).item()


def train_recorded(
    cfg: TrainConfig, run_dir: Path, monkeypatch: pytest.MonkeyPatch, precision: str = "fp32"
) -> Recorded:
    """`run_training(cfg)`, recording each update's loss (and, for hard attention, the
    evaluation-mode loss of the first batch, taken before the first update changes the
    weights)."""
    record = Recorded()
    update = trainer_module.Trainer.update
    hard = cfg.model.attention.hard is not HardMode.none

    def recorded(self, micro_batches):
        if not record.losses:
            batch = micro_batches[0][0]
            record.first_batch = batch.indices.tolist()
            if hard:
                record.eval_loss = evaluation_loss(self.model, batch, precision)
        outcome = update(self, micro_batches)
        record.losses.append(outcome.loss)
        record.applied.append(outcome.applied)
        return outcome

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module.Trainer, "update", recorded)
        start = time.perf_counter()
        run_training(cfg, run_dir)
        record.seconds = time.perf_counter() - start
    return record


_CPU_REFERENCE: dict[str, Recorded] = {}


def cpu_reference(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """The variant's first update on the CPU in float32 (once per test process)."""
    if name not in _CPU_REFERENCE:
        cfg = variant_config(name, *TRAIN, "trainer.device=cpu", "trainer.max_steps=1")
        _CPU_REFERENCE[name] = train_recorded(cfg, tmp_path / "cpu", monkeypatch)
    return _CPU_REFERENCE[name]


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("name", list(GPU_VARIANTS))
def test_trains_on_the_device_and_starts_where_the_cpu_does(
    name: str, precision: str, device: torch.device, tmp_path: Path, monkeypatch
) -> None:
    cfg = variant_config(
        name, *TRAIN, f"trainer.device={device}", f"trainer.precision={PRECISIONS[precision]}"
    )
    if device.type == "cpu" and precision == "fp16" and cfg.model.rnn.cell.value == "lstm":
        pytest.skip("oneDNN has no float16 LSTM on the CPU")
    run = train_recorded(cfg, tmp_path / "run", monkeypatch, precision)
    reference = cpu_reference(name, tmp_path, monkeypatch)

    # fp16 skips the updates whose scaled gradients overflow while its loss scale falls from
    # 2^16 (whether such an update counts as a step is the trainer's business); nothing else
    skipped = run.applied.count(False)
    assert skipped <= (5 if precision == "fp16" else 0), run.applied
    assert UPDATES <= len(run.losses) <= UPDATES + skipped, run.applied
    assert all(math.isfinite(loss) for loss in run.losses), run.losses
    assert run.losses[-1] < run.losses[0], run.losses  # it learns
    assert run.first_batch == reference.first_batch  # the same examples in the first batch
    tolerance = TOLERANCE[precision]
    if cfg.model.attention.hard is not HardMode.none:  # sampled positions: module docstring
        assert run.eval_loss == pytest.approx(reference.eval_loss, rel=tolerance)
    else:
        assert run.losses[0] == pytest.approx(reference.losses[0], rel=tolerance)


def test_compiled_training_on_the_device(
    device: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trainer.compile=true` (with two collating workers): finite losses, the first equal to
    the eager one, and graphs really compiled (torch.compile falls back to eager without a
    word when its backend fails: attnseq sets `suppress_errors`). The transformer only: the
    RNN decoders loop over target positions in Python, and each loop length compiles anew."""
    from torch._dynamo.utils import counters

    base = ("model.family=transformer", *TRAIN, f"trainer.device={device}")
    eager = train_recorded(tiny_config(*base), tmp_path / "eager", monkeypatch)
    torch._dynamo.reset()
    counters.clear()
    compiled_cfg = tiny_config(*base, "trainer.compile=true", "trainer.num_workers=2")
    compiled = train_recorded(compiled_cfg, tmp_path / "compiled", monkeypatch)
    assert all(math.isfinite(loss) for loss in compiled.losses), compiled.losses
    assert sum(compiled.applied) == UPDATES
    assert counters["aot_autograd"]["ok"] > 0, dict(counters["aot_autograd"])
    assert compiled.losses[0] == pytest.approx(eager.losses[0], rel=1e-3)
    assert compiled.losses[-1] == pytest.approx(eager.losses[-1], rel=2e-2)
