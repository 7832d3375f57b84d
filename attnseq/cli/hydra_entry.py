"""How `attnseq train` reaches Hydra and what its job returns: a real `hydra.main` entry, the task
function with its exit statuses, and torchrun's ranks (docs/internals/command_line.md)."""

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from attnseq.config import CONFIG_DIR
from attnseq.errors import OutputError, UserError

if TYPE_CHECKING:
    from attnseq.training.distributed import WorldInfo

# Hydra command-line flags that take a value (the next argument, or after `=`)
_FLAGS_WITH_VALUE = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
    "--shell-completion",
    "-sc",
    "--info",
    "-i",
}


def split_flags(args: list[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra's flags (and their values) from config overrides."""
    flags, overrides = [], []
    items = iter(args)
    for arg in items:
        if arg.startswith("-"):
            flags.append(arg)
            if arg in _FLAGS_WITH_VALUE and "=" not in arg:
                value = next(items, None)
                if value is not None:
                    flags.append(value)
        else:
            overrides.append(arg)
    return flags, overrides


def torchrun_world() -> "WorldInfo | None":
    """The world torchrun describes, or None in a process torchrun did not start."""
    if "RANK" not in os.environ:  # torchrun sets it in every worker: without it, no torch
        return None
    from attnseq.training.distributed import env_world

    return env_world()


# What ranks other than 0 must not take from the user: where Hydra writes, and its log file.
_WRITING_OVERRIDES = ("hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging=")


def quiet_rank_overrides(args: list[str]) -> list[str]:
    """`args` for a torchrun rank other than 0: Hydra creates and writes nothing (run dir `.`,
    no .hydra/, log to stdout); rank 0 tells the others what they need (distributed.py)."""
    kept = [arg for arg in args if not arg.lstrip("+~").startswith(_WRITING_OVERRIDES)]
    return [*kept, "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]


_FULL_ERROR = "HYDRA_FULL_ERROR"
# The user's own HYDRA_FULL_ERROR while `run_hydra` composes (None: unset), or _NOT_COMPOSING.
_NOT_COMPOSING = object()
_users_full_error: object = _NOT_COMPOSING


def run_hydra(args: list[str]) -> None:
    """Hand `args` to the real `hydra.main` entry (multirun, launchers, sweepers included).

    Raises:
        UserError: the config does not compose (an unknown key or choice, a bad value, a
            malformed YAML file, overrides that do not parse).
    """
    global _users_full_error
    import hydra

    from attnseq.config.composition import composition_error, composition_errors
    from attnseq.config.schema import register_configs

    register_configs()
    world = torchrun_world()
    if world is not None and not world.is_main:
        args = quiet_rank_overrides(args)
    # Hydra's argument parser takes the overrides as one run of positionals: flags first.
    flags, overrides = split_flags(args)
    sys.argv = ["attnseq", *flags, *overrides]
    main = hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")(
        train_from_hydra
    )
    # While Hydra composes, its own error report (status 1, its wording) lets a composition
    # error through to here; the start checks put the user's value back once it has composed.
    _users_full_error = os.environ.get(_FULL_ERROR)
    os.environ[_FULL_ERROR] = "1"
    try:
        main()
    except composition_errors() as error:
        if _users_full_error is _NOT_COMPOSING:
            raise  # the job's own, let through by the user's HYDRA_FULL_ERROR
        raise composition_error(error, overrides) from None
    finally:
        composition_finished()


def composition_finished() -> None:
    """Restore the user's HYDRA_FULL_ERROR once Hydra has composed the config (Hydra's
    callbacks call this before any job runs)."""
    global _users_full_error
    if _users_full_error is _NOT_COMPOSING:
        return
    if _users_full_error is None:
        os.environ.pop(_FULL_ERROR, None)
    else:
        os.environ[_FULL_ERROR] = str(_users_full_error)
    _users_full_error = _NOT_COMPOSING


def train_from_hydra(composed: Any) -> float | None:
    """The task function: DictConfig -> TrainConfig -> run_training; returns the optimized
    metric for sweepers."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from attnseq.config.schema import TrainConfig
    from attnseq.training.distributed import is_main_process
    from attnseq.training.initialization import initialized_config
    from attnseq.training.resume import interruption_message
    from attnseq.training.run import run_training
    from attnseq.training.run_checks import created_by_start, passed, remove_refused_start
    from attnseq.training.run_directory import check_run_directory
    from attnseq.training.stopping import TrainingDiverged, TrainingInterrupted

    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, TrainConfig)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # Under torchrun every rank gets here and exits with the same status; rank 0 speaks.
    main = is_main_process()
    created = created_by_start(run_dir) if main else []  # what a refused start removes
    try:
        # the architecture of model.init_from, as the start checks made it (run_checks.py)
        cfg = initialized_config(cfg, list(HydraConfig.get().overrides.task))
        if main and not passed(cfg, run_dir):  # the start checks did not: a sweep's job
            check_run_directory(run_dir, cfg.resume, cfg.trainer.overwrite, _elsewhere())
        metrics = run_training(cfg, run_dir)
    except OutputError as error:  # a full disk or read-only folder: nothing written is lost
        _fail(main, f"error: {error}; fix that, then continue with: {_resume(run_dir)}", 2)
    except UserError as error:
        remove_refused_start(run_dir, created)
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
    from attnseq.training.distributed import env_world

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
