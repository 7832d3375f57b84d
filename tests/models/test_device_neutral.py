"""No model creates a tensor on torch's default device: every tensor a forward pass, the loss,
the backward pass or decoding makes goes where the model's tensors are (`device=x.device`,
`new_zeros`, `zeros_like`), or says where it goes (`device="cpu"` for what is built on the
host on purpose and moved). A `torch.zeros(n)` without a device works on a CPU-only machine
and breaks on a GPU, where it lands on the CPU beside CUDA tensors.

The check runs every variant (model_variants.py) on the CPU with the default device set to
"meta": a tensor made without a device is then a meta tensor, which `StrayTensors` catches as
it is made and reports with the line of attnseq that made it. Meta tensors have no data, so
nothing made there could pass unnoticed into the numbers.
"""

import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from model_variants import variant_batch, variant_config, variant_model, variant_params
from torch.overrides import TorchFunctionMode

import attnseq
from attnseq.config.schema import DecodingConfig
from attnseq.decoding.beam_search import beam_search
from attnseq.decoding.greedy import greedy_decode
from attnseq.models.objective import training_loss

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

PACKAGE = Path(attnseq.__file__).parent
DEFAULT = torch.device("meta")  # where a tensor made without a device goes in these tests


class StrayTensors(TorchFunctionMode):
    """Fails the torch call whose result is on `DEFAULT`, naming the attnseq line that made it
    (innermost frame in the package) and the function."""

    def __torch_function__(self, func, types, args=(), kwargs=None) -> Any:
        result = func(*args, **(kwargs or {}))
        results = result if isinstance(result, tuple | list) else (result,)
        if any(isinstance(item, torch.Tensor) and item.device == DEFAULT for item in results):
            raise AssertionError(
                f"{self.maker()} makes a tensor on the default device with "
                f"{getattr(func, '__name__', func)}: give it device="
            )
        return result

    @staticmethod
    def maker() -> str:
        """file:line of the innermost attnseq frame of the current stack."""
        for frame in reversed(traceback.extract_stack()):
            path = Path(frame.filename)
            if path.is_relative_to(PACKAGE):
                return f"{path.relative_to(PACKAGE.parent)}:{frame.lineno}"
        return "torch, called from no attnseq frame,"


@pytest.mark.parametrize("variant", variant_params())
def test_training_and_decoding_make_no_tensor_on_the_default_device(variant: str) -> None:
    cfg = variant_config(variant)
    model = variant_model(cfg)
    batch, _ = variant_batch(cfg)
    copy_inputs = batch.copy_inputs()
    max_lengths = torch.full((batch.size,), 4)
    settings = DecodingConfig(beam=2, coverage_penalty=0.2 if model.has_attention else 0.0)
    with torch.device(DEFAULT), StrayTensors():
        model.train()
        output = model(batch.src, batch.src_lengths, batch.tgt_in, **copy_inputs)
        loss = training_loss(output, batch.tgt_out, model.pad_id, cfg.optim, step=0).loss
        loss.backward()
        model.eval()
        with torch.no_grad():
            model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True, **copy_inputs)
            greedy = greedy_decode(
                model, batch.src, batch.src_lengths, max_lengths, True, **copy_inputs
            )
            beams = beam_search(
                model, batch.src, batch.src_lengths, max_lengths, settings, True, **copy_inputs
            )
    assert loss.isfinite()
    assert len(greedy) == len(beams) == batch.size
