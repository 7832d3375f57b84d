"""Random-number-generator states: what a checkpoint saves so that a resumed run draws the same
dropout masks (and Python-level random numbers) as a run that never stopped."""

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import torch


def rng_state() -> dict[str, Any]:
    """The generator states the training loop draws from (dropout: torch; CUDA when in use)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    # is_initialized, not is_available: a CPU run on a GPU machine must not create a context.
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state` (a CUDA state is applied only where the devices match)."""
    torch.set_rng_state(state["torch"])
    if "python" in state:
        version, internal, gauss = state["python"]
        # weights_only loading turns the tuple of ints into a list; random wants a tuple.
        random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run the body without moving the training RNG stream: validation happens at different
    points of a resumed and an uninterrupted run's process lifetime, so anything it draws
    (today nothing: eval mode has no dropout) must not shift the draws of later steps."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
