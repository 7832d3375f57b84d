"""Checkpoint files: an atomic save and a load that runs no code (`torch.load(weights_only=True)`
on a dict of tensors, numbers, strings, lists and dicts; docs/internals/training.md lists its
entries)."""

import logging
import os
import pickle
import re
import shutil
import stat
import warnings
from pathlib import Path
from typing import Any

import torch

from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write
from attnseq.io.user_paths import check_path_name, special_file_kind

CHECKPOINT_FORMAT = "attnseq-checkpoint"
CHECKPOINT_VERSION = 1
STEP_CHECKPOINT = re.compile(r"step_(\d+)\.pt")
# What a checkpoint holds of one moment of its training run rather than of the model: what
# resuming reads, and what a model saved for use (an average, `Model.save`) leaves out.
TRAINING_STATE_KEYS = (
    "optimizer",
    "scheduler",
    "progress",
    "rng",
    "rng_ranks",
    "grad_scaler",
    "training_model",
    "ema",
)
# the checkpoint file's own header, added again by save_checkpoint
HEADER_KEYS = ("format", "version")
# How a torch checkpoint starts: a zip archive, or (older torch) a pickle's PROTO opcode
_TORCH_STARTS = (b"PK\x03\x04", b"\x80")
_SNIFF_BYTES = 512


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` (plus format and version) to `path` atomically."""
    full = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **payload}
    atomic_write(path, lambda handle: torch.save(full, handle))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint onto the CPU; any problem with the file is a UserError."""
    path = Path(path)
    check_path_name(path, "checkpoint")
    if path.is_dir():
        raise UserError(
            f"{path} is a folder, not a checkpoint file; pass a checkpoint such as "
            "RUN/checkpoints/best.pt (or the run directory RUN itself)"
        )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"checkpoint not found: {path}") from None
    except OSError as error:
        raise UserError(f"checkpoint {path} cannot be read: {error.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UserError(
            f"{path} is {special_file_kind(mode) or 'a special file'}, not a checkpoint file"
        )
    foreign = _foreign_content(path)
    if foreign is not None:
        raise UserError(f"{path} is not an attnseq checkpoint ({foreign})")
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it did not write
            warnings.simplefilter("ignore", UserWarning)
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UserError(
            f"{path} is not an attnseq checkpoint ({_pickled_objects(error)})"
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


def training_state_in(path: Path) -> list[str]:
    """The entries of training state (`TRAINING_STATE_KEYS`) that the file at `path` holds, by
    its content, whatever its name: [] when there is no file, or it is no torch checkpoint or
    cannot be read. Only the names of the entries are read: the tensors are memory-mapped, not
    loaded (an older torch's pickle, which cannot be mapped, is read whole)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode) or _foreign_content(path) is not None:
            return []
    except OSError:
        return []
    payload = None
    for mapped in (True, False):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                payload = torch.load(path, map_location="cpu", weights_only=True, mmap=mapped)
            break
        except Exception:  # a file torch cannot read holds no state to keep
            continue
    if not isinstance(payload, dict):
        return []
    return [key for key in TRAINING_STATE_KEYS if key in payload]


def refuse_replacing_training_state(path: Path, name: str, writer: str, remedy: str) -> None:
    """UserError when the file at `path` holds the state of a training run
    (`training_state_in`): the file that resuming the run reads, which the model file about
    to replace it leaves out.

    Args:
        path: the output, as the user gave it.
        name: how the message names it, e.g. "--out" or "path".
        writer: what would be written there, e.g. "an average" or "a saved model".
        remedy: what the user may do instead, e.g. "choose another path".
    """
    held = training_state_in(path)
    if held:
        raise UserError(
            f"{name} {path} holds the state of a training run ({', '.join(held)}), which "
            f"{writer} leaves out: writing over it would lose the means to resume that run; "
            f"{remedy}"
        )


def _pickled_objects(error: pickle.UnpicklingError) -> str:
    """What a file that torch's weights-only unpickler refused holds, in a few words: the
    class it would have to import when torch names it (a whole model saved with
    `torch.save(model)`, say), without torch's paragraph about `weights_only`."""
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(error))
    what = f"refers to {found.group(1)}" if found else "holds more than tensors and plain data"
    return (
        f"a pickle that {what}, which attnseq does not unpickle since that could run code; "
        "nothing was run; checkpoints are what attnseq train writes"
    )


def _foreign_content(path: Path) -> str | None:
    """What the file is instead, when its first bytes show it is no torch checkpoint; None for
    a file that may be one.

    `torch.save` writes a zip archive (``PK\\x03\\x04``); older torch versions wrote a pickle,
    which starts with the PROTO opcode (``\\x80``). Anything else is some other file, and is
    named here rather than handed to the unpickler, whose complaint about it would not say so.
    """
    with path.open("rb") as handle:
        head = handle.read(_SNIFF_BYTES)
    if head.startswith(_TORCH_STARTS):
        return None
    if not head:
        return "the file is empty"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 3:  # not merely a character cut at the end of `head`
            return f"a binary file starting with bytes {head[:8].hex(' ')}"
        text = head[: error.start].decode("utf-8")
    if not text.strip():
        return "a text file of blank space"
    first = text.strip().splitlines()[0][:40]
    return f"a text file, starting {first!r}; checkpoints are what attnseq train writes"


def keep_step_checkpoint(source: Path, step: int, keep: int) -> Path:
    """Keep the just-written checkpoint `source` also as step_STEP.pt beside it, then delete
    the oldest step checkpoints beyond `keep`. Returns the step checkpoint's path.

    The step file is a hard link to `source` (no second write of the same bytes; a later
    atomic replace of `source` leaves it untouched), or a copy where the filesystem has no
    hard links. It appears under its name by an atomic rename, so it is whole or absent, and
    older ones are removed only after it is in place.
    """
    target = source.parent / f"step_{step}.pt"
    # named like atomic_write's temporaries, so a killed run's leftover is cleaned up too
    temporary = source.parent / f".{target.name}.{os.getpid()}.link.tmp"
    temporary.unlink(missing_ok=True)
    try:
        os.link(source, temporary)
    except OSError:
        with source.open("rb") as handle:
            atomic_write(target, lambda out: shutil.copyfileobj(handle, out))
    else:
        try:
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    prune_step_checkpoints(source.parent, step, keep)
    return target


def step_checkpoints(folder: Path) -> dict[int, Path]:
    """The step_STEP.pt files in `folder`, by step."""
    found = {}
    for path in folder.glob("step_*.pt"):
        match = STEP_CHECKPOINT.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def prune_step_checkpoints(folder: Path, step: int, keep: int) -> list[Path]:
    """Delete all but the `keep` newest step checkpoints up to `step`; returns what was deleted.

    Step files beyond `step` belong to a run that continued further before this one resumed
    from an earlier point; they are left alone (this run rewrites them when it gets there)
    rather than counted as the newest, which would delete the file just written.
    """
    found = step_checkpoints(folder)
    steps = sorted(candidate for candidate in found if candidate <= step)
    removed = []
    for path in [found[old] for old in steps[: max(len(steps) - keep, 0)]]:
        logging.getLogger("attnseq").debug("removing %s (trainer.keep_last=%d)", path, keep)
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
