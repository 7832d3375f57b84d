"""Everything `attnseq train` checks before `hydra.main` writes anything: the composed config
and every run directory the command writes into.

The arguments are composed with Hydra's compose API before the real `hydra.main` runs, so that
a mistake ends with one message and exit status 2 instead of Hydra's exit status 1 (or a
traceback) from inside the run. Every value of a sweep is tried (one variant per value, the
other sweeps at their first), each composed config goes through the cross-field checks and, for
jobs that run on this machine, the resource checks. Hydra's own flags are checked for
combinations Hydra refuses; help and info output, and a primary config the user chooses, are
left to Hydra.

Hydra writes a job's record (.hydra/config.yaml, overrides.yaml, hydra.yaml) and opens its
train.log before it calls the task function, so every check that can refuse a start runs here;
a refused start leaves every file of the run directory as it was.

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

from attnseq.cli.config_errors import describe_composition_error, describe_yaml_error, yaml_error
from attnseq.cli.hydra_entry import quoted_value, torchrun_world
from attnseq.config import CONFIG_DIR
from attnseq.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

# Hydra's settings (the `hydra` node) and the typed config of one composed job
Job = tuple["DictConfig", "TrainConfig"]

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
_INFORMATIONAL = {
    "--help",
    "-h",
    "--hydra-help",
    "--version",
    "--info",
    "-i",
    "--shell-completion",
    "-sc",
}
_PRIMARY_CONFIG_FLAGS = {"--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"}

# Flags under which Hydra runs no `attnseq train` job of the packaged config: it prints
# something, replays a run, or composes a primary config the user chose.
_NO_CHECKED_JOB = _INFORMATIONAL | _PRIMARY_CONFIG_FLAGS | {"-c", "--cfg", "--experimental-rerun"}

# Flags that choose what Hydra does; at most one may be given.
_MODE_FLAGS = {
    "-r": "--run",
    "--run": "--run",
    "-m": "--multirun",
    "--multirun": "--multirun",
    "-c": "--cfg",
    "--cfg": "--cfg",
    "-i": "--info",
    "--info": "--info",
    "-sc": "--shell-completion",
    "--shell-completion": "--shell-completion",
}

# Jobs a cluster launcher runs elsewhere fit (or not) the machines they run on, not this one.
_REMOTE_LAUNCHERS = ("hydra/launcher=submitit_slurm",)


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


def runs_no_checked_job(flags: list[str]) -> bool:
    """Whether Hydra, given `flags`, runs no job whose run directory attnseq checks."""
    return any(flag.split("=", 1)[0] in _NO_CHECKED_JOB for flag in flags)


def sweep_variants(overrides: list[str]) -> list[list[str]]:
    """One override list per value of every sweep (others at their first value)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep

    parsed = OverridesParser.create().parse_overrides(overrides)
    choices: list[list[str]] = []
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override():
            sweep = override.value()
            if isinstance(sweep, IntervalSweep):
                # A sweeper samples inside the interval: check its ends (key and type).
                values = [sweep.start, sweep.end]
            else:
                values = list(override.sweep_string_iterator())
            choices.append([f"{key}={value}" for value in values])
        else:
            choices.append([override.input_line])
    base = [options[0] for options in choices if options]
    variants = [base]
    for position, options in enumerate(choices):
        for option in options[1:]:
            variant = [opts[0] for opts in choices[:position] if opts]
            variant.append(option)
            variant += [opts[0] for opts in choices[position + 1 :] if opts]
            variants.append(variant)
    return variants


def preflight(args: list[str]) -> Job | None:
    """Compose the config the way the run will and validate it; UserError on any problem.

    Returns the first variant's composed job (what `settle_run_directories` reads the run
    directory from), or None when Hydra is left to answer (help, info, a user's primary config).
    """
    from hydra.errors import OverrideParseException

    from attnseq.config.checks import validate
    from attnseq.config.resources import check_resources
    from attnseq.config.schema import register_configs
    from attnseq.training.trackers import check_trackers_installed

    flags, overrides = split_flags(args)
    _check_flags(flags)
    if any(flag in _INFORMATIONAL or flag in _PRIMARY_CONFIG_FLAGS for flag in flags):
        return None  # help/info output, or a user-chosen primary config: leave it to Hydra
    try:
        variants = sweep_variants(overrides)
    except OverrideParseException as error:
        raise UserError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    register_configs()
    remote = any(arg.startswith(_REMOTE_LAUNCHERS) for arg in overrides)
    first: Job | None = None
    for variant in variants:
        job = compose_job(variant)
        _, cfg = job
        validate(cfg)
        if not remote:
            check_resources(cfg)
            check_trackers_installed(cfg.logger)
        first = job if first is None else first
    return first


def _check_flags(flags: list[str]) -> None:
    """UserError for Hydra flags that cannot go together, or multirun under torchrun."""
    world = torchrun_world()
    if world is not None and world.distributed and any(f in {"-m", "--multirun"} for f in flags):
        raise UserError(
            "-m/--multirun cannot run under torchrun: one torchrun job trains one model. "
            "Start one torchrun job per configuration (or drop -m)"
        )
    # Hydra's own rule, checked here so that breaking it is a clear error, not a traceback.
    modes = {_MODE_FLAGS[flag] for flag in flags if flag in _MODE_FLAGS}
    if len(modes) > 1:
        raise UserError(
            f"{' and '.join(sorted(modes))} cannot be combined: give only one of --run, "
            "-m/--multirun, --cfg, --info and --shell-completion"
        )


def compose_job(overrides: list[str]) -> Job:
    """Hydra's own settings (the `hydra` node: run and sweep directories, sweeper) and the
    typed config that `overrides` compose to; UserError naming what is wrong."""
    import copy

    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from attnseq.config.schema import TrainConfig

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            composed = compose("train", overrides=overrides, return_hydra_config=True)
        task = copy.deepcopy(composed)  # `composed` keeps the hydra node's interpolations
        with open_dict(task):
            del task["hydra"]
        cfg = OmegaConf.to_object(task)
    except (HydraException, OmegaConfBaseException, ValueError, yaml.YAMLError) as error:
        malformed = yaml_error(error)
        if malformed is not None:
            raise UserError(describe_yaml_error(malformed)) from None
        raise UserError(describe_composition_error(error, overrides)) from None
    assert isinstance(cfg, TrainConfig)
    return composed.hydra, cfg


_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def settle_run_directories(args: list[str], first: Job | None) -> list[str]:
    """`args` for `hydra.main`, with a fresh time-stamped directory made and named in them,
    once every run directory the command writes into has passed its checks. `first` is what
    `preflight` returned: the composed job of a sweep's first value.

    Raises:
        UserError: a directory in use, holding a run the command would mix with, or a resume
            checkpoint that does not fit.
    """
    from hydra.types import RunMode

    from attnseq.training.distributed import env_world

    flags, overrides = split_flags(args)
    if not env_world().is_main or runs_no_checked_job(flags):
        return args  # no job runs, or one that writes no run directory (torchrun's other ranks)
    assert first is not None  # the pre-flight check composed every job that gets here
    hydra_settings, cfg = first
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
