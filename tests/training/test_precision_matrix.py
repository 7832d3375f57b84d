"""Every model variant (model_variants.py: each family, each RNN score and window, each
transformer self-attention kind, hard attention, the pointer-generator, hierarchical attention)
trains three updates under reduced precision on the CPU, through `train_step` as the trainer
runs it: bf16 autocast, and fp16 autocast with the loss scale of `torch.amp.GradScaler`.

bf16 keeps float32's exponent range, so every update must apply with a finite loss. Under fp16
an update whose gradients overflow is skipped and halves the scale (GradScaler starts at 2^16,
which a model may overflow): the losses must be finite, every skipped update must be such an
overflow, and at least one of the three must apply. In both, weights and gradients stay float32
(autocast's "master weights"). tests/training/test_precision.py runs whole trainings (the
scale in the checkpoint, overflow handling, resume); this file runs the matrix.
"""

import math
from dataclasses import dataclass

import pytest
import torch
from model_variants import variant_batch, variant_config, variant_model, variant_params

from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.distributed import WorldInfo
from attnseq.training.optim import build_optimizer
from attnseq.training.precision import MixedPrecision
from attnseq.training.train_step import StepOutcome, UpdateParts, train_step

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

UPDATES = 3
CPU = torch.device("cpu")


@dataclass
class Trained:
    """Three updates of one variant: what each did, the model, its weights before them and
    the precision (autocast and loss scale) they ran under."""

    outcomes: list[StepOutcome]
    model: Seq2Seq
    start: dict[str, torch.Tensor]
    precision: MixedPrecision

    def assert_float32_weights_moved(self) -> None:
        """Weights and gradients stay float32, and the applied updates changed the weights."""
        weights = dict(self.model.named_parameters())
        assert all(w.dtype == torch.float32 for w in weights.values())
        assert all(w.grad is None or w.grad.dtype == torch.float32 for w in weights.values())
        assert any(not torch.equal(self.start[name], w) for name, w in weights.items())


def three_updates(variant: str, precision: str) -> Trained:
    """`UPDATES` updates of `variant` on the one batch under `trainer.precision=precision`
    ("bf16" or "fp16"), as the trainer runs them."""
    cfg = variant_config(variant)
    model = variant_model(cfg)
    start = {name: weight.detach().clone() for name, weight in model.named_parameters()}
    mixed = MixedPrecision(precision, CPU)
    optimizer = build_optimizer(model, cfg.optim)
    parts = UpdateParts(model, model, optimizer, mixed, cfg.optim, WorldInfo())
    batch = variant_batch(cfg)
    outcomes = [train_step(parts, [batch], step) for step in range(UPDATES)]
    return Trained(outcomes, model, start, mixed)


@pytest.mark.parametrize("variant", variant_params())
def test_bf16_updates_apply_with_finite_losses(variant: str) -> None:
    trained = three_updates(variant, "bf16")
    assert all(math.isfinite(o.loss) and o.applied for o in trained.outcomes), trained.outcomes
    trained.assert_float32_weights_moved()


@pytest.mark.parametrize("variant", variant_params())
def test_fp16_updates_apply_or_lower_the_loss_scale(variant: str) -> None:
    trained = three_updates(variant, "fp16")
    outcomes = trained.outcomes
    assert all(math.isfinite(o.loss) for o in outcomes), outcomes
    # a skipped update is an overflow, which lowered the scale (not divergence)
    assert all(o.applied or o.loss_scale is not None for o in outcomes), outcomes
    assert any(o.applied for o in outcomes), f"every update overflowed: {outcomes}"
    overflows = sum(not o.applied for o in outcomes)
    # the scaler state a checkpoint keeps: the initial 2^16, halved once per overflow (it
    # grows only after 2,000 clean updates)
    assert trained.precision.state_dict()["scale"] == 2.0**16 / 2**overflows
    trained.assert_float32_weights_moved()
