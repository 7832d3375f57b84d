"""Self-contained checkpoints: atomic save and safe load.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts:

    format, version          identify the file ("attnseq-checkpoint", CHECKPOINT_VERSION)
    config                   the resolved TrainConfig as a plain dict (config.config_to_dict)
    tokenizers               {"src": state, "tgt": state} (attnseq.data.tokenizers state dicts)
    model                    model.state_dict()
    optimizer, scheduler     their state dicts (training resumes from them)
    progress                 step, epoch, batch position in the epoch, best metric so far
    rng                      torch (and CUDA) generator states

Because it holds nothing but those types, it loads with `torch.load(weights_only=True)`: the
restricted unpickler refuses any object that could run code, so a crafted file runs nothing.
"""

import pickle
from pathlib import Path
from typing import Any

import torch

from attnseq.atomic import atomic_write
from attnseq.errors import UserError

CHECKPOINT_FORMAT = "attnseq-checkpoint"
CHECKPOINT_VERSION = 1


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` (plus format and version) to `path` atomically."""
    full = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **payload}
    atomic_write(path, lambda handle: torch.save(full, handle))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint onto the CPU; any problem with the file is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UserError(
            f"refusing to load {path}: it is not a plain attnseq checkpoint (it contains "
            f"objects that could run code when unpickled; nothing was run). Detail: "
            f"{str(error).splitlines()[0]}"
        ) from None
    except Exception as error:  # truncated/corrupt files fail in many ways inside torch.load
        raise UserError(
            f"cannot read checkpoint {path}: the file is truncated or not a torch checkpoint "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not an attnseq checkpoint (no '{CHECKPOINT_FORMAT}' marker)")
    if payload.get("version") != CHECKPOINT_VERSION:
        raise UserError(
            f"{path} has checkpoint version {payload.get('version')}; this attnseq reads "
            f"version {CHECKPOINT_VERSION}"
        )
    return payload
