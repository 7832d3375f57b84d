"""Writes a run's resumable state to checkpoints/{last,best,step_N}.pt and restores it; reading
the states draws no random numbers, so saving leaves the training stream untouched."""

import logging
import time
from pathlib import Path
from typing import Any

import torch

from attnseq.io.atomic import remove_stale_temporaries
from attnseq.io.checkpoint import keep_step_checkpoint, save_checkpoint
from attnseq.models.seq2seq import Seq2Seq
from attnseq.training.distributed import WorldInfo, all_gather_object
from attnseq.training.ema import WeightEMA
from attnseq.training.optim import LearningRateSchedule, load_optimizer_state
from attnseq.training.precision import MixedPrecision
from attnseq.training.state import TrainingState, rng_state
from attnseq.training.stopping import TrainingDiverged, kept_checkpoints

log = logging.getLogger("attnseq")


class Checkpointer:
    """Saves and restores the stateful parts of a training run.

    Args:
        folder: the run's checkpoints/ folder.
        static_payload: fields that never change during the run (config dict, tokenizer
            states), merged into every checkpoint.
        keep_last: also keep each last.pt as step_STEP.pt, the newest `keep_last` of them.
    """

    def __init__(
        self,
        folder: Path,
        static_payload: dict[str, Any],
        keep_last: int,
        world: WorldInfo,
        model: Seq2Seq,
        optimizer: torch.optim.Optimizer,
        schedule: LearningRateSchedule,
        precision: MixedPrecision,
        ema: WeightEMA | None = None,
    ) -> None:
        self.folder = folder
        self.static_payload = static_payload
        self.keep_last = keep_last
        self.world = world
        self.model = model
        self.optimizer = optimizer
        self.schedule = schedule
        self.precision = precision
        self.ema = ema
        self.last_saved_step: int | None = None  # step of the newest last.pt written here
        self.last_save = time.monotonic()
        if world.is_main:
            remove_stale_temporaries(folder)

    def payload(self, state: TrainingState) -> dict[str, Any]:
        """Everything a resumed run needs.

        Data-parallel: a collective (every rank's RNG state is gathered into `rng_ranks`), so
        every rank calls it at the same point.
        """
        payload = {
            **self.static_payload,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "progress": vars(state).copy(),
            "rng": rng_state(),
            "grad_scaler": self.precision.state_dict(),
        }
        if self.ema is not None:
            payload["training_model"] = payload["model"]
            payload["model"] = self.ema.average
            payload["ema"] = {"decay": self.ema.decay, "updates": self.ema.updates}
        if self.world.distributed:
            payload["rng_ranks"] = all_gather_object(payload["rng"])
        return payload

    def save(self, name: str, state: TrainingState) -> Path:
        """Write checkpoints/NAME atomically; refuses (TrainingDiverged) to write weights that
        are not finite, so a checkpoint on disk is always a usable model.

        Data-parallel: called by every rank at the same step (the weights are the same on all,
        so all take the same decision); only rank 0 writes.
        """
        averaged = self.ema.average.values() if self.ema is not None else []
        if not _all_finite([*self.model.parameters(), *averaged]):
            raise TrainingDiverged(
                f"the weights became non-finite after step {state.step}, though every update "
                "applied had a finite loss and gradient: a callback that changes the model's "
                "weights, or an update too large for them (lower optim.lr or use gradient "
                f"clipping, optim.clip_norm); {name} was not written "
                f"({kept_checkpoints(self.folder, self.last_saved_step)})"
            )
        path = self.folder / name
        payload = self.payload(state)
        if self.world.is_main:
            save_checkpoint(path, payload)
            if name == "last.pt" and self.keep_last:
                keep_step_checkpoint(path, state.step, self.keep_last)
        if name == "last.pt":
            self.last_saved_step = state.step
            self.last_save = time.monotonic()
        return path

    def restore(self, payload: dict[str, Any]) -> tuple[TrainingState, dict[str, Any]]:
        """Load weights, optimizer, schedule and loss scale from `payload`; returns the saved
        training state and this rank's RNG state (applied by the trainer right before its first
        step, so that whatever is built in between cannot shift it)."""
        self.model.load_state_dict(payload.get("training_model", payload["model"]))
        if self.ema is not None:
            self.ema.restore(payload["model"], int(payload["ema"]["updates"]))
        load_optimizer_state(self.optimizer, payload["optimizer"], self.model)
        self.schedule.load_state_dict(payload["scheduler"])
        self.precision.load_state_dict(payload.get("grad_scaler", {}))
        state = TrainingState.from_dict(payload["progress"])
        rng = payload["rng"]
        ranks_rng = payload.get("rng_ranks")
        if ranks_rng is not None and len(ranks_rng) == self.world.world_size:
            rng = ranks_rng[self.world.rank]
        self._convert_world_size(state)
        return state, rng

    def _convert_world_size(self, state: TrainingState) -> None:
        """Resuming with another number of processes: step k of R ranks covers batches k*R ..
        k*R+R-1 of the epoch's global order, so the consumed prefix converts; rounding down
        repeats fewer than R batches at most."""
        saved, now = state.world_size, self.world.world_size
        if saved == now:
            return
        consumed = state.batch_in_epoch * saved
        state.batch_in_epoch, state.world_size = consumed // now, now
        if self.world.is_main:
            log.warning(
                "resuming a run of %d process(es) with %d: the data order continues from "
                "batch %d of the epoch, but differs from a run that never stopped",
                saved,
                now,
                consumed,
            )


def _all_finite(tensors: Any) -> bool:
    flags = [torch.isfinite(t).all() for t in tensors if t.is_floating_point()]
    return bool(torch.stack(flags).all()) if flags else True
