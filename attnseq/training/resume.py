"""Continuing a run from a checkpoint: finding and checking the resume point, bringing the old
run's best.pt along, and saying how to continue after a signal."""

import logging
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnseq.config.conversion import config_from_dict, resume_conflicts
from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.stopping import TrainingInterrupted

log = logging.getLogger("attnseq")

# what a checkpoint needs to continue training (an averaged checkpoint holds the model only)
CHECKPOINT_KEYS = ("config", "tokenizers", "model", "optimizer", "scheduler", "progress", "rng")


@dataclass
class ResumePoint:
    """A checkpoint a run continues from, already checked against the run's config."""

    path: Path
    payload: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.payload["progress"]["step"])


def find_resume_point(cfg: TrainConfig, run_dir: Path) -> ResumePoint | None:
    """The checkpoint `cfg.resume` names (None: a fresh run).

    resume=auto takes RUN_DIR/checkpoints/last.pt and starts fresh, saying so, when there is
    none (the first attempt of a job that is simply re-submitted). A file that is missing, not
    an attnseq checkpoint, holds no training state, or was trained with different
    model/data/optim settings is a UserError naming the problem (`check_resume`).
    """
    path = resume_path(cfg, run_dir)
    if path is None:
        if cfg.resume == "auto":
            log.warning(
                "resume=auto: no checkpoint at %s; starting a fresh run (resume=auto continues "
                "the run of the run directory it is given)",
                run_dir / "checkpoints" / "last.pt",
            )
        return None
    point = ResumePoint(path, _checked_payload(cfg, path))
    log.info("resuming from %s (step %d)", path, point.step)
    return point


def check_resume(cfg: TrainConfig, run_dir: Path) -> None:
    """Raise the UserError that `find_resume_point` would, without logging or keeping the
    checkpoint: `attnseq train` calls it before anything is written to the run directory."""
    path = resume_path(cfg, run_dir)
    if path is not None:
        _checked_payload(cfg, path)


def resume_path(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """The checkpoint file a run with `cfg` in `run_dir` continues from; None for a fresh run
    (no `resume`, or resume=auto and no RUN_DIR/checkpoints/last.pt yet)."""
    if cfg.resume is None:
        return None
    if cfg.resume == "auto":
        path = run_dir / "checkpoints" / "last.pt"
        return path if path.is_file() else None
    return Path(cfg.resume).expanduser()


def _checked_payload(cfg: TrainConfig, path: Path) -> dict[str, Any]:
    """The checkpoint at `path`, loaded and checked against `cfg`; UserError in one line."""
    payload = load_checkpoint(path)
    missing = [key for key in CHECKPOINT_KEYS if key not in payload]
    if missing:
        raise UserError(
            f"cannot resume from {path}: it holds no {', '.join(missing)} (e.g. an average of "
            "checkpoints holds weights only); resume from a run's checkpoints/last.pt or best.pt"
        )
    try:
        saved = config_from_dict(payload["config"])
    except UserError as error:
        raise UserError(f"cannot resume from {path}: its configuration: {error}") from None
    conflicts = resume_conflicts(saved, cfg)
    if conflicts:
        raise UserError(
            f"cannot resume from {path}: these settings differ from the checkpoint's, and they "
            "decide the model, its vocabulary, the data order or the optimizer state: "
            + "; ".join(conflicts)
            + ". Drop those overrides (or set them to the checkpoint's values), or start a new "
            "run without resume="
        )
    return payload


def carry_best_checkpoint(point: ResumePoint, run_dir: Path) -> None:
    """resume=PATH from another run directory: copy that run's best.pt next to the new last.pt,
    so the final test evaluation has the best model even if the resumed part never beats it."""
    target = run_dir / "checkpoints" / "best.pt"
    source = point.path.parent / "best.pt"
    if target.exists() or not source.is_file():
        return
    with source.open("rb") as handle:
        atomic_write(target, lambda out: shutil.copyfileobj(handle, out))
    log.info("copied %s to %s", source, target)


def interruption_message(interruption: TrainingInterrupted, run_dir: Path, command: str) -> str:
    """What was saved when a signal stopped the run, and how to continue it."""
    name = signal.Signals(interruption.signum).name
    last = run_dir / "checkpoints" / "last.pt"
    at = f" (step {interruption.step})" if interruption.step is not None else ""
    if interruption.graceful:
        head = f"training stopped by {name}: the current step finished and {last}{at} is saved."
    elif last.is_file():
        head = f"training stopped by {name}; the newest checkpoint is {last}{at}."
    else:
        head = f"training stopped by {name} before any checkpoint was written."
    return f"{head}\nResume with:\n  {command}"
