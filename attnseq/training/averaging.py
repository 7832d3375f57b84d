"""Checkpoint averaging: the elementwise mean of the parameters of several checkpoints of one
model, theta_avg = (1 / n) sum_i theta_i (Vaswani et al. 2017, section 6.1)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnseq.errors import UserError
from attnseq.io.checkpoint import HEADER_KEYS, TRAINING_STATE_KEYS, load_checkpoint
from attnseq.models.head_mask import optional_entry
from attnseq.models.loading import check_structure


def average_checkpoints(paths: Sequence[Path]) -> dict[str, Any]:
    """Average the model weights of `paths` (all of one model).

    Args:
        paths: checkpoints written by `attnseq train` (or by this function), at least one.

    Returns:
        a checkpoint payload: the first checkpoint's config and tokenizers, the averaged
        "model" state dict, and "averaged_from" (the paths as strings).

    Raises:
        UserError: no paths, one file given twice, an unreadable checkpoint, or checkpoints
            of different models (configuration, tokenizers, parameter names or shapes, head
            masks).
    """
    if not paths:
        raise UserError("average needs at least one checkpoint")
    _refuse_duplicates(paths)
    first_path = Path(paths[0])
    first = load_checkpoint(first_path)
    check_structure(first_path, first)
    reference: dict[str, Tensor] = first["model"]
    sums = {  # head masks are equal in all (checked) and copied from the first
        name: tensor.to(torch.float64)
        for name, tensor in reference.items()
        if tensor.is_floating_point() and not optional_entry(name)
    }
    for path in paths[1:]:
        payload = load_checkpoint(path)
        check_structure(Path(path), payload)
        _check_same_model(first_path, first, Path(path), payload)
        for name, tensor in payload["model"].items():
            if name in sums:
                sums[name] += tensor.to(torch.float64)
    count = len(paths)
    averaged = {
        name: (sums[name] / count).to(tensor.dtype) if name in sums else tensor.clone()
        for name, tensor in reference.items()
    }
    result = {
        key: value
        for key, value in first.items()
        if key not in TRAINING_STATE_KEYS and key not in HEADER_KEYS
    }
    result["model"] = averaged
    result["averaged_from"] = [str(path) for path in paths]
    return result


def _refuse_duplicates(paths: Sequence[Path]) -> None:
    """UserError naming two of `paths` that are one file (same device and inode: the same
    path, a `..` spelling, a symbolic or a hard link). Paths that do not exist are left to
    `load_checkpoint` to report."""
    seen: dict[tuple[int, int], Path] = {}
    for path in map(Path, paths):
        try:
            status = path.stat()
        except OSError:
            continue
        key = (status.st_dev, status.st_ino)
        if key in seen:
            raise UserError(
                f"{seen[key]} and {path} are the same checkpoint file: averaging it twice "
                "would weigh it double; give each checkpoint once"
            )
        seen[key] = path


def _check_same_model(
    first_path: Path, first: dict[str, Any], path: Path, payload: dict[str, Any]
) -> None:
    """UserError naming the first difference that makes averaging meaningless."""
    first_model, model = first["model"], payload["model"]
    missing = sorted(name for name in set(first_model) - set(model) if not optional_entry(name))
    extra = sorted(name for name in set(model) - set(first_model) if not optional_entry(name))
    if missing or extra:
        details = []
        if missing:
            details.append(f"missing {', '.join(missing[:5])}")
        if extra:
            details.append(f"unexpected {', '.join(extra[:5])}")
        raise UserError(
            f"cannot average {path} with {first_path}: different parameters "
            f"({'; '.join(details)}); only checkpoints of one model can be averaged"
        )
    for name, tensor in first_model.items():
        if name in model and model[name].shape != tensor.shape:
            raise UserError(
                f"cannot average {path} with {first_path}: parameter {name} has shape "
                f"{tuple(model[name].shape)} there and {tuple(tensor.shape)} here"
            )
    _check_same_head_masks(first_path, first_model, path, model)
    first_model_cfg = first.get("config", {}).get("model")
    model_cfg = payload.get("config", {}).get("model")
    if first_model_cfg != model_cfg:
        keys = _differing_keys(first_model_cfg or {}, model_cfg or {}, "model.")
        raise UserError(
            f"cannot average {path} with {first_path}: different model configurations "
            f"({', '.join(keys[:5]) or 'model'})"
        )
    if first.get("tokenizers") != payload.get("tokenizers"):
        raise UserError(
            f"cannot average {path} with {first_path}: different tokenizers (vocabularies), "
            "so the same id means different tokens"
        )


def _check_same_head_masks(
    first_path: Path, first_model: dict[str, Tensor], path: Path, model: dict[str, Tensor]
) -> None:
    """UserError naming the first head mask, an (H,) buffer, that differs between the two
    state dicts (a missing one keeps every head: all ones)."""
    for name in sorted(name for name in first_model.keys() | model.keys() if optional_entry(name)):
        here, there = first_model.get(name), model.get(name)
        present = here if here is not None else there
        assert present is not None  # the name comes from one of the two
        here = torch.ones_like(present) if here is None else here
        there = torch.ones_like(present) if there is None else there
        if not torch.equal(here.float(), there.float()):
            raise UserError(
                f"cannot average {path} with {first_path}: different head masks ({name} is "
                f"{_mask_text(there)} there and {_mask_text(here)} here; 0 = pruned head); "
                "average checkpoints pruned alike"
            )


def _mask_text(mask: Tensor) -> str:
    """An (H,) head mask as '[1 0 1 1]'."""
    return "[" + " ".join(f"{value:g}" for value in mask.tolist()) + "]"


def _differing_keys(left: dict[str, Any], right: dict[str, Any], prefix: str) -> list[str]:
    """Dotted names of the keys whose values differ between two nested dicts."""
    keys = []
    for key in sorted(set(left) | set(right)):
        a, b = left.get(key), right.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys.extend(_differing_keys(a, b, f"{prefix}{key}."))
        elif a != b:
            keys.append(f"{prefix}{key}")
    return keys
