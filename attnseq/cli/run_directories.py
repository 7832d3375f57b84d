"""Where `attnseq train` writes, settled before `hydra.main` writes anything there.

Hydra writes a job's record (.hydra/config.yaml, overrides.yaml, hydra.yaml) and opens its
train.log before it calls the task function, so every check that can refuse a start runs here,
between the pre-flight check (preflight.py) and `hydra.main`; a refused start leaves every file
of the run directory as it was.

* A time-stamped directory (one whose setting uses `${now:...}`, as the default
  outputs/DATE/TIME and multirun/DATE/TIME do) belongs to one run: it is created here, and
  when a run started in the same second already has it, the first free of DIR_2, DIR_3, ... is
  taken instead; the chosen path is passed on to Hydra as `hydra.run.dir` (`hydra.sweep.dir`).
* Any other directory is checked: a running training there (run_directory.py), a run it holds that
  the new one neither resumes nor replaces (attnseq/training/run_directory.py), and the resume
  checkpoint's agreement with the config (attnseq/training/resume.py).
* In a multirun into an existing sweep folder, each job's folder is checked the same way, with
  the job's own config; under a sweeper other than Hydra's basic one the jobs are not known in
  advance, so every folder in the sweep folder is checked for a run (and the resume checkpoint
  of each job when it starts).
"""

from pathlib import Path
from typing import TYPE_CHECKING

from attnseq.cli.hydra_entry import quoted_value
from attnseq.cli.preflight import compose_job, runs_no_checked_job, split_flags, sweep_variants
from attnseq.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def settle_run_directories(args: list[str]) -> list[str]:
    """`args` for `hydra.main`, with a fresh time-stamped directory made and named in them,
    once every run directory the command writes into has passed its checks.

    Raises:
        UserError: a directory in use, holding a run the command would mix with, or a resume
            checkpoint that does not fit.
    """
    from hydra.types import RunMode

    from attnseq.training.distributed import env_world

    flags, overrides = split_flags(args)
    if not env_world().is_main or runs_no_checked_job(flags):
        return args  # no job runs, or one that writes no run directory (torchrun's other ranks)
    # A sweep's first job (the pre-flight check composed every value already).
    hydra_settings, cfg = compose_job(sweep_variants(overrides)[0])
    if any(flag in ("-m", "--multirun") for flag in flags) or (
        hydra_settings.mode == RunMode.MULTIRUN
    ):
        return _settle_sweep(args, overrides, hydra_settings, cfg)
    run_dir, timestamped = _directory(hydra_settings.run)
    if timestamped:
        if cfg.resume != "auto":  # resume=auto in a fresh folder starts fresh: nothing to check
            _check_resume(cfg, run_dir)
        return [*args, f"hydra.run.dir={quoted_value(str(_claim_fresh(run_dir)))}"]
    _check_job_directory(run_dir, cfg, "hydra.run.dir=DIR")
    return args


def _settle_sweep(
    args: list[str], overrides: list[str], hydra_settings: "DictConfig", cfg: "TrainConfig"
) -> list[str]:
    """A multirun: a fresh time-stamped sweep folder, or each job's folder checked."""
    sweep_dir, timestamped = _directory(hydra_settings.sweep)
    if timestamped:
        return [*args, f"hydra.sweep.dir={quoted_value(str(_claim_fresh(sweep_dir)))}"]
    if not sweep_dir.is_dir():
        return args
    jobs = _basic_sweep_jobs(overrides, hydra_settings)
    if jobs is None:
        for folder in sorted(path for path in sweep_dir.iterdir() if path.is_dir()):
            _check_job_directory(folder, cfg, "hydra.sweep.dir=DIR", resume_checked=False)
        return args
    from omegaconf import open_dict

    for number, job in enumerate(jobs):
        job_settings, job_cfg = compose_job(job)
        with open_dict(job_settings):
            job_settings.job.num = number
        _check_job_directory(
            sweep_dir / str(job_settings.sweep.subdir), job_cfg, "hydra.sweep.dir=DIR"
        )
    return args


def _basic_sweep_jobs(overrides: list[str], hydra_settings: "DictConfig") -> list[list[str]] | None:
    """The override list of every job, in Hydra's job order (job N is the N-th), when Hydra's
    basic sweeper runs the sweep; None under another sweeper (its jobs are chosen as it goes)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if hydra_settings.sweeper.get("_target_") != _BASIC_SWEEPER:
        return None
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    own = [override.input_line for override in parsed if override.is_hydra_override()]
    swept = hydra_settings.sweeper.get("params") or {}  # a sweep that a config file defines
    task = [f"{key}={value}" for key, value in swept.items()]
    task += [override.input_line for override in parsed if not override.is_hydra_override()]
    try:
        batches = BasicSweeper.split_arguments(parser.parse_overrides(task), None)
    except HydraException:
        return None  # a sweep the basic sweeper refuses: Hydra says so when it starts
    return [[*job, *own] for job in batches[0]]


def _directory(node: "DictConfig") -> tuple[Path, bool]:
    """The directory of Hydra's `run` or `sweep` settings, and whether it is time-stamped."""
    from omegaconf import OmegaConf

    setting = OmegaConf.to_container(node, resolve=False)["dir"]
    return Path(str(node.dir)), "${now:" in str(setting)


def _check_job_directory(
    run_dir: Path, cfg: "TrainConfig", elsewhere: str, resume_checked: bool = True
) -> None:
    """The checks of a job writing into `run_dir`, the ones that read nothing slow first."""
    from attnseq.training.run_directory import check_free, check_run_directory

    check_free(run_dir)
    check_run_directory(run_dir, cfg.resume, cfg.trainer.overwrite, elsewhere)
    if resume_checked:
        _check_resume(cfg, run_dir)


def _check_resume(cfg: "TrainConfig", run_dir: Path) -> None:
    from attnseq.training.resume import check_resume

    check_resume(cfg, run_dir)


def _claim_fresh(path: Path) -> Path:
    """Create `path`, or the first of `path`_2, `path`_3, ... that does not exist yet, and return
    it. mkdir either creates a folder or fails, so two runs started at once get two folders."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate, number = path, 1
        while True:
            try:
                candidate.mkdir()
                return candidate
            except FileExistsError:
                number += 1
                candidate = path.with_name(f"{path.name}_{number}")
    except OSError as error:
        raise UserError(f"cannot create the run directory {path}: {error.strerror}") from None
