"""Mixed-precision training (`trainer.precision`): autocast, and loss scaling for float16.

    32    float32 everywhere (the default; also spelled fp32).
    bf16  matmuls and convolutions autocast to bfloat16. bfloat16 keeps float32's exponent
          range, so gradients cannot underflow and no loss scaling is needed.
    fp16  autocast to float16 with dynamic loss scaling (Micikevicius et al. 2018, "Mixed
          Precision Training", ICLR, section 3.2): the loss is multiplied by a scale S before
          the backward pass so that small gradients stay representable, the gradients are divided
          by S again before clipping and the update, and S is halved whenever a gradient
          overflows (that update is skipped) and doubled after 2,000 overflow-free updates
          (`torch.amp.GradScaler`).

Autocast keeps numerically sensitive operations (softmax, log-softmax, layer norm, the loss) in
float32 by itself; the weights and the optimizer state stay float32 ("master weights").

Both reduced precisions also run on a CPU (torch's CPU autocast), but there they are usually
slower than float32 unless the processor has bfloat16/float16 matrix units (AMX, AVX512-FP16):
`MixedPrecision` says so in the log and runs what was asked.
"""

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger("attnseq")

PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


class MixedPrecision:
    """Autocast and (fp16) loss scaling for one training run on one device.

    Usage in an update::

        with precision.autocast():
            loss = loss_of(model(batch))
        precision.backward(loss)
        precision.unscale(optimizer)       # before clipping: the true gradients
        ...clip, check the norm...
        overflowed = precision.step(optimizer)

    Args:
        precision: "fp32", "bf16" or "fp16" (the names of `config.Precision`).
        device: where the model runs.
    """

    def __init__(self, precision: str, device: torch.device) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
        self.precision = precision
        self.dtype = PRECISIONS[precision]
        self.device_type = device.type
        # Only fp16 needs a scale; a disabled GradScaler passes everything through unchanged.
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        if self.dtype is not None and device.type == "cpu":
            log.warning(
                "trainer.precision=%s on the CPU: autocast runs, but is usually slower than "
                "float32 unless the processor has %s matrix units",
                precision,
                "bfloat16 (AMX)" if precision == "bf16" else "float16 (AMX-FP16, AVX512-FP16)",
            )

    @property
    def enabled(self) -> bool:
        return self.dtype is not None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The forward pass and the loss run inside this block."""
        with torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled):
            yield

    def backward(self, loss: Tensor) -> None:
        """Backward of the (fp16: scaled) loss."""
        self.scaler.scale(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale (fp16), so clipping sees the true ones."""
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step and, for fp16, the scale update (a step whose gradients
        overflowed is skipped by the scaler and halves the scale)."""
        self.scaler.step(optimizer)
        self.scaler.update()

    def skip_overflow(self) -> float:
        """fp16: the gradients overflowed; skip this update and lower the scale. Returns the
        new scale. (Call after `unscale`, instead of `step`.)"""
        self.scaler.update()  # sees the inf recorded by unscale_ and halves the scale
        return self.scaler.get_scale()

    @property
    def scales_loss(self) -> bool:
        """True for fp16: a non-finite gradient is an expected overflow, not divergence."""
        return self.scaler.is_enabled()

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.scaler.load_state_dict(state)
