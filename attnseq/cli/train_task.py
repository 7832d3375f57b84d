"""The body of `attnseq train`'s hydra.main task: a composed config in, an exit status out.

Hydra would turn every exception into status 1 with a traceback; here a user error is one
message and status 2, SIGINT/SIGTERM are 130/143 with the command that resumes the run, and a
diverged run is status 1 with what was kept.
"""

import os
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

from attnseq.config.schema import TrainConfig
from attnseq.errors import OutputError, UserError
from attnseq.training.distributed import env_world, is_main_process
from attnseq.training.resume import interruption_message
from attnseq.training.run import run_training
from attnseq.training.run_directory import check_run_directory
from attnseq.training.stopping import TrainingDiverged, TrainingInterrupted


def train_from_hydra(composed: Any) -> float | None:
    """DictConfig -> TrainConfig -> run_training; returns the optimized metric for sweepers."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, TrainConfig)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # Under torchrun every rank gets here and exits with the same status; rank 0 speaks.
    main = is_main_process()
    try:
        if main:  # `attnseq train` checked it before Hydra wrote; a sweeper's jobs get here
            check_run_directory(run_dir, cfg.resume, cfg.trainer.overwrite, _elsewhere())
        metrics = run_training(cfg, run_dir)
    except OutputError as error:  # a full disk or read-only folder: nothing written is lost
        _fail(main, f"error: {error}; fix that, then continue with: {_resume(run_dir)}", 2)
    except UserError as error:
        _fail(main, f"error: {error}", 2)
    except TrainingInterrupted as interruption:
        message = interruption_message(interruption, run_dir, _resume(run_dir))
        _fail(main, message, interruption.exit_status)
    except TrainingDiverged as error:
        _fail(main, f"error: {error}", 1)
    key = cfg.optimized_metric or f"test/{cfg.trainer.early_stopping_metric.value}"
    if key not in metrics:
        _fail(
            main, f"error: optimized_metric={key!r} is not in metrics.json: {', '.join(metrics)}", 2
        )
    return metrics[key]


def _elsewhere() -> str:
    """The override that puts this Hydra job's run directory elsewhere."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    return "hydra.sweep.dir=DIR" if multirun else "hydra.run.dir=DIR"


def _fail(speaks: bool, message: str, status: int) -> NoReturn:
    if speaks:
        print(message, file=sys.stderr)
    sys.exit(status)


def _resume(run_dir: Path) -> str:
    return _torchrun_prefix() + resume_command(run_dir)


def _torchrun_prefix() -> str:
    """What goes before `attnseq train ...` to resume a run torchrun started ("" otherwise)."""
    if not env_world().distributed:
        return ""
    per_node = os.environ.get("LOCAL_WORLD_SIZE", "N")
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    if nodes <= 1:
        return f"torchrun --nproc_per_node={per_node} -m "
    return (
        f"torchrun --nnodes={nodes} --nproc_per_node={per_node} "
        "--rdzv_backend=c10d --rdzv_endpoint=HOST:PORT -m "  # on every node
    )


def resume_command(run_dir: Path) -> str:
    """`attnseq train resume=auto hydra.run.dir=RUN_DIR OVERRIDES`: the command that continues
    this Hydra job (in a sweep: this one job), quoted for a POSIX shell."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    searchpath = [o for o in hydra_cfg.overrides.hydra if o.startswith("hydra.searchpath=")]
    task = []
    for override in hydra_cfg.overrides.task:
        if override.lstrip("+").startswith(("resume=", "trainer.overwrite=")):
            continue  # resume=auto is added; overwrite would replace what it continues
        if override.startswith("experiment=") and not searchpath:
            override = "config=" + override.split("=", 1)[1]  # the CLI's name for it
        task.append(override)
    args = ["resume=auto", f"hydra.run.dir={run_dir}", *searchpath, *task]
    return "attnseq train " + " ".join(shlex.quote(arg) for arg in args)
