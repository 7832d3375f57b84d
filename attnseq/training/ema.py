"""An exponential moving average of the weights, after every applied update t (1-based):

d_t        = min(decay, (1 + t) / (10 + t))
theta_ema <- d_t * theta_ema + (1 - d_t) * theta"""

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

WARMUP_OFFSET = 10  # d_t = (1 + t) / (10 + t) while it is below the decay


class WeightEMA:
    """The moving average of `model`'s state (parameters and buffers).

    Args:
        model: the model trained (its current weights start the average).
        decay: the long-run decay in [0, 1); about 1 / (1 - decay) updates are averaged.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"the EMA decay must lie in [0, 1), not {decay}")
        self.decay = decay
        self.updates = 0
        self.average: dict[str, Tensor] = {
            name: value.detach().clone() for name, value in model.state_dict().items()
        }

    def decay_at(self, update: int) -> float:
        """d_t of the update numbered `update` (1-based)."""
        return min(self.decay, (1 + update) / (WARMUP_OFFSET + update))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold the weights after one applied update into the average."""
        self.updates += 1
        d = self.decay_at(self.updates)
        for name, value in model.state_dict().items():
            average = self.average[name]
            if average.is_floating_point():
                average.lerp_(value.detach(), 1.0 - d)  # d * avg + (1 - d) * value
            else:
                average.copy_(value)

    @contextlib.contextmanager
    def swapped_in(self, model: nn.Module) -> Iterator[None]:
        """The model holds the average inside the block and its training weights after it
        (also when the block raises)."""
        training = {name: value.detach().clone() for name, value in model.state_dict().items()}
        model.load_state_dict(self.average)
        try:
            yield
        finally:
            model.load_state_dict(training)

    def restore(self, average: dict[str, Tensor], updates: int) -> None:
        """Continue a saved average after `updates` updates (exact resume); the decay stays the
        configured one."""
        for name, value in average.items():
            self.average[name].copy_(value)
        self.updates = updates
