"""What `attnseq train` checks before Hydra writes anything: its flags, then, in a Hydra callback
between composition and the run directory, the run or every value of a sweep."""

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from hydra.experimental.callback import Callback

from attnseq.cli.hydra_entry import composition_finished, torchrun_world
from attnseq.config.composition import (
    composition_error,
    composition_errors,
    directory_setting,
    quoted_value,
)
from attnseq.errors import UserError
from attnseq.training.run_checks import check_job, check_job_directory, check_run, run_config
from attnseq.training.run_directory import claim_fresh

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

# Composes one sweep job's task overrides into its whole config (the `hydra` node included).
Compose = Callable[[list[str]], "DictConfig"]

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

# Jobs a cluster launcher runs elsewhere fit (or not) the machines they run on, not this one
# (the ends of the launchers' `_target_`).
_REMOTE_LAUNCHERS = ("SlurmLauncher",)


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


def check_flags(flags: list[str]) -> None:
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
    _parse_as_hydra_does(flags)


def _parse_as_hydra_does(flags: list[str]) -> None:
    """UserError for flags that Hydra's own argument parser refuses (an unknown flag, a value
    outside a flag's choices such as `--cfg nope`, or an override taken as the value of
    `--info`), with the parser's message as one line: Hydra would print its whole usage text
    first. `--version` is left out: the parser would print Hydra's version and exit."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()

    def refuse(message: str) -> NoReturn:
        raise UserError(f"{message} (`attnseq train --hydra-help` lists Hydra's flags)")

    parser.error = refuse  # type: ignore[method-assign]
    parser.parse_args([flag for flag in flags if flag != "--version"])


class StartChecks(Callback):
    """Runs the checks of `attnseq train` on the config Hydra composed for the command.

    Hydra composes the config, calls `on_run_start` (`on_multirun_start`), and only then makes
    the run directory, writes .hydra/ and opens train.log; a check that fails here ends the
    command with one message and exit status 2 and leaves every directory as it was. Registered
    under `hydra.callbacks` in the packaged train.yaml.
    """

    def on_run_start(self, config: "DictConfig", **kwargs: Any) -> None:
        composition_finished()
        _exit_on_user_error(check_run, config)

    def on_multirun_start(self, config: "DictConfig", **kwargs: Any) -> None:
        composition_finished()
        _exit_on_user_error(check_sweep, config, _loader_composition(config))


def _exit_on_user_error(check: Callable[..., None], *args: Any) -> None:
    """Run `check`; a UserError is one message and exit status 2. SystemExit passes through
    Hydra's error report, which would print any other exception with exit status 1."""
    try:
        check(*args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def _loader_composition(config: "DictConfig") -> Compose:
    """Composition of one sweep job's overrides by the config loader of the running Hydra, the
    way its launcher composes the job (the primary config's Hydra overrides included)."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()

    def compose(overrides: list[str]) -> "DictConfig":
        try:
            return loader.load_sweep_config(config, overrides)
        except composition_errors() as error:
            raise composition_error(error, overrides) from None

    return compose


def check_sweep(config: "DictConfig", compose: Compose) -> None:
    """The checks of a multirun: every value of every sweep (each with the others at their
    first), then its sweep folder: a fresh time-stamped one is claimed, an existing one has
    each job's folder checked."""
    task = [str(override) for override in config.hydra.overrides.task]
    remote = str(config.hydra.launcher.get("_target_", "")).endswith(_REMOTE_LAUNCHERS)
    first = check_sweep_values(task, compose, on_this_machine=not remote)
    sweep_dir, timestamped = directory_setting(config.hydra.sweep)
    if timestamped:
        fresh = str(claim_fresh(sweep_dir))
        config.hydra.sweep.dir = fresh
        # The launcher composes each job from the primary config's Hydra overrides.
        config.hydra.overrides.hydra.append(f"hydra.sweep.dir={quoted_value(fresh)}")
        return
    if not sweep_dir.is_dir():
        return
    jobs = _basic_sweep_jobs(task, config.hydra)
    if jobs is None:
        for folder in sorted(path for path in sweep_dir.iterdir() if path.is_dir()):
            check_job_directory(folder, first, "hydra.sweep.dir=DIR", resume_checked=False)
        return
    from omegaconf import open_dict

    for number, job in enumerate(jobs):
        job_config = compose(job)
        with open_dict(job_config):
            job_config.hydra.job.num = number
        check_job_directory(
            sweep_dir / str(job_config.hydra.sweep.subdir),
            run_config(job_config),
            "hydra.sweep.dir=DIR",
        )


def check_sweep_values(
    task: list[str], compose: Compose, on_this_machine: bool = True
) -> "TrainConfig":
    """`check_job` for every value of every sweep in the task overrides (each with the other
    sweeps at their first value); returns the typed config of the first variant."""
    try:
        variants = sweep_variants(task)
    except composition_errors() as error:
        raise composition_error(error, task) from None
    first: TrainConfig | None = None
    for variant in variants:
        cfg = check_job(compose(variant), on_this_machine)
        first = first or cfg
    assert first is not None
    return first


_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def _basic_sweep_jobs(task: list[str], hydra_settings: "DictConfig") -> list[list[str]] | None:
    """The task overrides of every job, in Hydra's job order (job N is the N-th), when Hydra's
    basic sweeper runs the sweep; None under another sweeper (its jobs are chosen as it goes)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if hydra_settings.sweeper.get("_target_") != _BASIC_SWEEPER:
        return None
    swept = hydra_settings.sweeper.get("params") or {}  # a sweep that a config file defines
    jobs = [*(f"{key}={value}" for key, value in swept.items()), *task]
    try:
        batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(jobs), None)
    except HydraException:
        return None  # a sweep the basic sweeper refuses: Hydra says so when it starts
    return [list(job) for job in batches[0]]
