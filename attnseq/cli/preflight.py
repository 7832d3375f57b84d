"""The pre-flight check of `attnseq train`: the arguments are composed once with Hydra's
compose API before the real `hydra.main` runs, so that a mistake ends with one message and exit
status 2 instead of Hydra's exit status 1 (or a traceback) from inside the run.

Every value of a sweep is tried (one variant per value, the other sweeps at their first), each
composed config goes through the cross-field checks and, for jobs that run on this machine, the
resource checks. Hydra's own flags are checked for combinations Hydra refuses; help and info
output, and a primary config the user chooses, are left to Hydra.
"""

from typing import TYPE_CHECKING

from attnseq.cli.config_errors import describe_composition_error, describe_yaml_error, yaml_error
from attnseq.cli.hydra_entry import torchrun_world
from attnseq.config import CONFIG_DIR
from attnseq.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

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


def preflight(args: list[str]) -> None:
    """Compose the config the way the run will and validate it; UserError on any problem."""
    from hydra.errors import OverrideParseException

    from attnseq.config.checks import validate
    from attnseq.config.resources import check_resources
    from attnseq.config.schema import register_configs

    flags, overrides = split_flags(args)
    _check_flags(flags)
    if any(flag in _INFORMATIONAL or flag in _PRIMARY_CONFIG_FLAGS for flag in flags):
        return  # help/info output, or a user-chosen primary config: leave it to Hydra
    try:
        variants = sweep_variants(overrides)
    except OverrideParseException as error:
        raise UserError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    register_configs()
    remote = any(arg.startswith(_REMOTE_LAUNCHERS) for arg in overrides)
    for variant in variants:
        _, cfg = compose_job(variant)
        validate(cfg)
        if not remote:
            check_resources(cfg)


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


def compose_job(overrides: list[str]) -> tuple["DictConfig", "TrainConfig"]:
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
