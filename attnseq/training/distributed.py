"""Data-parallel training under torchrun: the process group and the few collectives the training
loop needs; without torchrun every helper is the single-process identity."""

import contextlib
import datetime
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from attnseq.errors import UserError

log = logging.getLogger("attnseq")

T = TypeVar("T")
S = TypeVar("S")

DEFAULT_TIMEOUT_MINUTES = 60.0


@dataclass(frozen=True)
class WorldInfo:
    """Where this process stands: its rank among all processes, its rank on its machine (the
    GPU it drives) and the number of processes."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes and validates."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def env_world() -> WorldInfo:
    """The world torchrun describes in the environment (a single process when it says nothing)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 or "RANK" not in os.environ:
        return WorldInfo()
    rank = int(os.environ["RANK"])
    return WorldInfo(rank, int(os.environ.get("LOCAL_RANK", rank)), world_size)


def world() -> WorldInfo:
    """The world of the initialised process group, else a single process."""
    if not (dist.is_available() and dist.is_initialized()):
        return WorldInfo()
    rank = dist.get_rank()
    return WorldInfo(rank, int(os.environ.get("LOCAL_RANK", rank)), dist.get_world_size())


def is_distributed() -> bool:
    """True inside a process group of more than one process."""
    return world().distributed


def is_main_process() -> bool:
    """Rank 0, or a single process. Before the group exists, what the environment says."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return env_world().is_main


@contextlib.contextmanager
def distributed_session(device_type: str) -> Iterator[WorldInfo]:
    """Join the process group torchrun's environment describes, for the body; leave it after.

    Args:
        device_type: "cuda" (NCCL; each process drives the GPU of its LOCAL_RANK) or "cpu"
            (gloo).

    Yields the world. A group that already exists (a caller set it up) is used as it is and
    left alone; without torchrun's variables (or WORLD_SIZE=1) nothing is initialised.
    """
    if dist.is_available() and dist.is_initialized():
        yield world()
        return
    info = env_world()
    if not info.distributed:
        yield info
        return
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    minutes = float(os.environ.get("ATTNSEQ_DIST_TIMEOUT_MINUTES", DEFAULT_TIMEOUT_MINUTES))
    timeout = datetime.timedelta(minutes=minutes)
    if device_type == "cuda":
        device = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    if info.is_main:
        log.info("distributed: %d processes, backend %s", info.world_size, dist.get_backend())
    try:
        yield info
    except BaseException:
        dist.destroy_process_group()
        raise
    # Leave together: a gloo rank that tears its group down while another still finishes
    # (rank 0 writes the final files) can abort at exit ("terminate called without an active
    # exception", seen in CI), which torchrun reports as a failed run.
    dist.barrier()
    dist.destroy_process_group()


def _collective_device() -> torch.device:
    """Where tensors of a collective live: NCCL only moves GPU tensors."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sum over all ranks of a few numbers, in float64 (exact for token counts).

    One collective for all of them; in a single process the values come back unchanged.
    """
    if not is_distributed():
        return [float(v) for v in values]
    tensor = torch.tensor(list(values), dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_reduce_tensor(tensor: Tensor) -> Tensor:
    """Element-wise sum over all ranks of `tensor`, returned on its device; on NCCL the sum is
    queued on the GPU's stream and the host does not wait for it. Unchanged in a single
    process."""
    if not is_distributed():
        return tensor
    summed = tensor.to(_collective_device())
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    return summed.to(tensor.device)


def broadcast_object(obj: T, src: int = 0) -> T:
    """`obj` of rank `src` on every rank (pickled; for small things: paths, metric dicts).

    Other ranks pass anything (None) and wait here until `src` arrives, so this is also the
    barrier behind rank-0-only work. In a single process `obj` is returned as it is.
    """
    if not is_distributed():
        return obj
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=src, device=_collective_device())
    return box[0]


def all_gather_object(obj: T) -> list[T]:
    """Every rank's `obj`, in rank order (a one-element list in a single process)."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier() -> None:
    """Wait for every rank (a no-op in a single process)."""
    if is_distributed():
        dist.barrier()


def decided_on_main(
    world: WorldInfo, compute: Callable[[], T], shared: Callable[[T], S]
) -> tuple[T | None, S]:
    """`compute()` on rank 0 only; every rank gets `shared(result)` (broadcast from rank 0),
    rank 0 also the result itself (the others None). A UserError on rank 0 is raised on every
    rank, so each exits with status 2 instead of waiting for rank 0 forever."""
    if not world.distributed:
        result = compute()
        return result, shared(result)
    result: T | None = None
    value: Any = None
    error: str | None = None
    if world.is_main:
        try:
            result = compute()
            value = shared(result)
        except UserError as problem:
            error = str(problem)
    value, error = broadcast_object((value, error))
    if error is not None:
        raise UserError(error)
    return result, value
