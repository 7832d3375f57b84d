"""Devices as torch spells them (auto, cpu, cuda, cuda:N, mps), checked against this machine.
torch loads inside the functions: the config layer loads without it."""

import re
from typing import TYPE_CHECKING

from attnseq.errors import UserError

if TYPE_CHECKING:
    import torch

DEVICE_FORMS = "auto, cpu, cuda, cuda:N, mps"
_PATTERN = re.compile(r"auto|cpu|mps|cuda(:(0|[1-9][0-9]{0,3}))?")


def check_device_name(name: object, setting: str = "device") -> str:
    """`name` when it is one of the forms above; else a UserError (a TypeError when it is not a
    string or torch.device at all). `setting` is how the caller's user names it
    (`trainer.device`, `device`)."""
    if type(name).__name__ == "device" and type(name).__module__ == "torch":
        name = str(name)
    if not isinstance(name, str):
        raise TypeError(f"{setting} must be a str or torch.device, not {type(name).__name__}")
    if not _PATTERN.fullmatch(name):
        raise UserError(
            f"{setting}={name!r} is not a device; valid forms: {DEVICE_FORMS} "
            f"(this machine has {available_devices()})"
        )
    return name


def resolve_device(name: object, setting: str = "device") -> "torch.device":
    """The torch device for `name` on this machine.

    Raises:
        UserError: `name` is not one of the forms, or this machine lacks the device.
        TypeError: `name` is neither a str nor a torch.device.
    """
    import torch

    name = check_device_name(name, setting)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index is not None and device.index >= count):
            raise UserError(
                f"{setting}={name} but this machine has {available_devices()}; "
                f"valid forms: {DEVICE_FORMS}"
            )
    if device.type == "mps" and not _mps_available():
        raise UserError(
            f"{setting}=mps but this machine has {available_devices()}; valid forms: {DEVICE_FORMS}"
        )
    return device


def available_devices() -> str:
    """What this machine offers, for messages: `cpu, cuda:0 (NVIDIA H100 80GB HBM3)` or
    `cpu only (no CUDA device, no mps)`."""
    import torch

    names = []
    if torch.cuda.is_available():
        names += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(gpu_count())]
    if _mps_available():
        names.append("mps")
    return ", ".join(["cpu", *names]) if names else "cpu only (no CUDA device, no mps)"


def gpu_count() -> int:
    """CUDA devices torch can use here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_summaries() -> list[tuple[str, str]]:
    """(cuda:N, "name, total memory GiB, free GiB, compute capability X.Y") for each GPU."""
    import torch

    rows = []
    for index in range(gpu_count()):
        properties = torch.cuda.get_device_properties(index)
        free, total = torch.cuda.mem_get_info(index)
        rows.append(
            (
                f"cuda:{index}",
                f"{properties.name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free), "
                f"compute capability {properties.major}.{properties.minor}",
            )
        )
    return rows


def _mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())
