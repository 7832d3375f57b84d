"""Mixed-precision training (`trainer.precision`: 32, bf16, fp16 with loss scaling) and TF32
matmuls (`trainer.tf32`) (docs/internals/training.md)."""

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from attnseq.attention.full import fused_kernel
from attnseq.attention.masks import bottom_right_causal_mask, padding_mask
from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError

log = logging.getLogger("attnseq")

PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def attention_kernels(cfg: TrainConfig, device: torch.device) -> str:
    """Which scaled-dot-product kernel a transformer's attention runs in training on `device`
    at `trainer.precision`, for a batch with padding (encoder self- and cross-attention) and for
    the decoder's causal self-attention with padding: e.g. "efficient (padded), efficient
    (causal, padded); explicit softmax where weights are asked for (heatmaps, alignment)".
    Asked of torch's dispatcher on small inputs of the model's head size (fused_kernel)."""
    model = cfg.model
    heads, size = model.heads, model.d_model // model.heads
    dtype = PRECISIONS[cfg.trainer.precision.name] or torch.float32
    q = torch.zeros(2, heads, 8, size, device=device, dtype=dtype)  # (B, H, T, d_k)
    lengths = torch.tensor([8, 5], device=device)
    padded = padding_mask(lengths)[:, None, None, :]  # (B, 1, 1, S): True = a real token
    causal = padded & bottom_right_causal_mask(8, 8, device)  # (B, 1, T, S)
    dropout = model.attention_dropout
    kinds = [
        f"{fused_kernel(q, q, q, padded, dropout)} (padded)",
        f"{fused_kernel(q, q, q, causal, dropout)} (causal, padded)",
    ]
    return ", ".join(kinds) + "; explicit softmax where weights are asked for (heatmaps, AER)"


def peak_gpu_memory(device: torch.device) -> dict[str, float]:
    """{"peak_gpu_memory_mib": the most memory torch's allocator held for tensors on `device`
    since the process started}, for metrics.json; empty off CUDA."""
    if device.type != "cuda":
        return {}
    return {"peak_gpu_memory_mib": torch.cuda.max_memory_allocated(device) / 2**20}


def check_precision_supported(cfg: TrainConfig, device: torch.device) -> None:
    """Refuse, before any work, a precision the device's kernels lack: CPU builds of torch run
    an LSTM under float16 autocast only where oneDNN has float16 kernels for it (processors
    with AVX512-FP16 or AMX-FP16); elsewhere the first forward pass would fail mid-run.
    Probed with a one-step LSTM of the smallest size.

    Raises:
        UserError: the combination cannot run here.
    """
    model = cfg.model
    if cfg.trainer.precision.name != "fp16" or device.type != "cpu":
        return
    if model.family.name != "rnn" or model.rnn.cell.name != "lstm":
        return
    probe = torch.nn.LSTM(1, 1)
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            probe(torch.zeros(1, 1, 1))
    except RuntimeError:
        raise UserError(
            "trainer.precision=fp16 with model.rnn.cell=lstm: torch has no float16 LSTM for "
            "this CPU; use trainer.precision=bf16 or 32, or model.rnn.cell=gru"
        ) from None


def use_tf32(enabled: bool, device: torch.device) -> None:
    """TF32 for float32 matmuls and cuDNN convolutions on `device`: float32's 8-bit exponent,
    10 bits of mantissa, on the tensor cores of NVIDIA GPUs from Ampere on; the setting is
    process-wide in torch, so it is set at the start of each run."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    if not enabled:
        return
    if device.type != "cuda":
        log.warning(
            "trainer.tf32=true has no effect on %s: TF32 is a CUDA tensor-core format", device
        )
    elif torch.cuda.get_device_capability(device)[0] < 8:
        name = torch.cuda.get_device_name(device)
        log.warning("trainer.tf32=true: %s predates Ampere and has no TF32 units", name)


class MixedPrecision:
    """Autocast and (fp16) loss scaling for one training run on one device. bf16 keeps
    float32's exponent range and needs no scaling; fp16 scales the loss by S before the
    backward pass and the gradients by 1 / S before clipping, halving S on an overflow (whose
    update is skipped) and doubling it after 2,000 clean updates (Micikevicius et al. 2018,
    section 3.2; `torch.amp.GradScaler`). Softmax, norms and the loss stay float32 under
    autocast, and so do the weights and the optimizer state.

    Usage in an update::

        with precision.autocast():
            loss = loss_of(model(batch))
        precision.backward(loss)
        precision.unscale(optimizer)       # before clipping: the true gradients
        ...clip, compute whether the loss and the gradient norm are finite (`apply`)...
        precision.step(optimizer, apply)   # skipped on the device where `apply` is False

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

    def step(self, optimizer: torch.optim.Optimizer, apply: Tensor) -> None:
        """The optimizer step, taken only where `apply` (a 0-d bool tensor on the model's
        device: the loss and the gradient norm are finite) holds, decided on the device so that
        the host does not wait for the update's numbers.

        fp16: the scaler's own overflow check (non-finite scaled gradients) skips the step and
        halves the scale (`GradScaler.update`). Otherwise a fused optimizer (optim.py) takes
        `found_inf` and leaves parameters, moments and step count untouched where it is 1, as
        it does for the scaler. An optimizer without that skip waits for `apply` instead.
        """
        if self.scaler.is_enabled():
            self.scaler.step(optimizer)
            self.scaler.update()
        elif getattr(optimizer, "_step_supports_amp_scaling", False):
            optimizer.grad_scale, optimizer.found_inf = None, (~apply).float()
            try:
                optimizer.step()
            finally:
                del optimizer.grad_scale, optimizer.found_inf
        elif bool(apply):  # a host-device synchronisation; only unfused optimizers get here
            optimizer.step()

    def scale(self) -> Tensor | None:
        """fp16: the loss scale as a 0-d tensor on the device (read later: no waiting now);
        None otherwise."""
        return self.scaler._get_scale_async() if self.scaler.is_enabled() else None

    @property
    def scales_loss(self) -> bool:
        """True for fp16: a non-finite gradient is an expected overflow, not divergence."""
        return self.scaler.is_enabled()

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.scaler.load_state_dict(state)
