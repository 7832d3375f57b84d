"""How `attnseq train` reaches Hydra: a real `hydra.main` entry, plus a pre-flight check.

`hydra.main` owns everything Hydra does (multirun, launchers, sweepers, run directories,
`--cfg`, `--help`), so `attnseq train ARGS` rewrites `sys.argv` and calls it. Before that, the
arguments are composed once with Hydra's compose API (every value of a sweep is tried), so a
typo ends with one message, the nearest valid key or option and exit status 2, instead of
Hydra's exit status 1 from inside the run.

`config=NAME` selects the packaged experiment/NAME.yaml; `config=PATH` (a path ending in .yaml
or .yml, or containing a `/`) loads the user's own experiment file, always: it is linked into a
private search-path folder under a name no packaged experiment can have (`user_file__...`), so
it can use the packaged config groups in its defaults list like any packaged experiment, and
its absolute path is recorded in the composed config as `config_file`.

Under torchrun (`torchrun --nproc_per_node=N -m attnseq train ...`) every process runs this;
the ones other than rank 0 get Hydra overrides that keep Hydra from writing anything (no run
directory, no .hydra/, no train.log; their log goes to stdout), since only rank 0 writes.
Multirun is refused there: one torchrun job trains one model.
"""

import difflib
import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from attnseq.config import CONFIG_DIR
from attnseq.errors import UserError

# Hydra command-line flags: (flag, takes a value)
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


# Prefix of the experiment names that user files are linked under; no packaged experiment
# name starts with it, so a user's file can never be shadowed by (or shadow) a packaged one.
USER_EXPERIMENT_PREFIX = "user_file__"


def user_experiment_dir(path: Path) -> tuple[str, Path]:
    """Link a user's experiment file into ~/.cache/attnseq/experiments/<hash>/experiment/.

    Returns the experiment name (unique to the file's absolute path) and the folder to add to
    Hydra's search path.
    """
    path = path.expanduser().absolute()
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    _check_package_header(path)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    root = Path.home() / ".cache" / "attnseq" / "experiments" / digest
    group = root / "experiment"
    try:
        group.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot link config file {path} under {group}: {error}") from None
    name = f"{USER_EXPERIMENT_PREFIX}{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest}"
    link = group / f"{name}.yaml"
    # A fresh link renamed into place: processes doing this at once (torchrun) do not race.
    fresh = group / f".{name}.{os.getpid()}.yaml"
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(path.resolve())
    os.replace(fresh, link)
    return name, root


def _check_package_header(path: Path) -> None:
    """An experiment file sets keys of the whole config: without a `# @package _global_`
    header Hydra would put them under an `experiment` key that does not exist."""
    try:
        head = path.read_bytes()[:4096]
    except OSError as error:
        raise UserError(f"cannot read config file {path}: {error.strerror}") from None
    for line in head.splitlines():
        text = line.strip()
        if text.startswith(b"#") and b"@package" in text:
            return
        if text and not text.startswith(b"#"):
            break
    raise UserError(
        f"config file {path} has no '# @package _global_' line before its first key: an "
        "experiment file sets keys of the whole config, so it starts with that line "
        "(see the packaged attnseq/config/experiment/*.yaml)"
    )


def _quoted(value: str) -> str:
    """`value` as a quoted Hydra override value: any path survives the override grammar."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


def _is_path(value: str) -> bool:
    return value.endswith((".yaml", ".yml")) or "/" in value or os.sep in value


def rewrite_config_selector(args: list[str]) -> list[str]:
    """`config=NAME` -> `experiment=NAME`; `config=PATH` -> search path + experiment + the
    path recorded as `config_file`."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("config_file="):
            raise UserError(
                "config_file is set by config=PATH (the experiment file it loaded); "
                "use config=PATH to load a file"
            )
        if not arg.startswith("config="):
            out.append(arg)
            continue
        value = arg.split("=", 1)[1]
        if _is_path(value):
            name, root = user_experiment_dir(Path(value))
            out += [
                f"experiment={name}",
                f"hydra.searchpath=[{_quoted('file://' + str(root))}]",
                f"config_file={_quoted(str(Path(value).expanduser().absolute()))}",
            ]
        else:
            out.append(f"experiment={value}")
    return out


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


def _sweep_variants(overrides: list[str]) -> list[list[str]]:
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


_REMOTE_LAUNCHERS = ("hydra/launcher=submitit_slurm",)


def preflight(args: list[str]) -> None:
    """Compose the config the way the run will and validate it; UserError on any problem."""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from attnseq.config.checks import validate
    from attnseq.config.resources import check_resources
    from attnseq.config.schema import TrainConfig, register_configs

    flags, overrides = split_flags(args)
    if env_world_size() > 1 and any(flag in {"-m", "--multirun"} for flag in flags):
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
    if any(flag in _INFORMATIONAL for flag in flags) or any(
        flag in {"--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd"}
        for flag in flags
    ):
        return  # help/info output, or a user-chosen primary config: leave it to Hydra
    from hydra.errors import OverrideParseException

    try:
        variants = _sweep_variants(overrides)
    except OverrideParseException as error:
        raise UserError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    register_configs()
    # Jobs a cluster launcher runs elsewhere fit (or not) the machines they run on, not this one.
    remote = any(arg.startswith(_REMOTE_LAUNCHERS) for arg in overrides)
    for variant in variants:
        try:
            with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
                composed = compose("train", overrides=variant)
                cfg = OmegaConf.to_object(composed)
        except (HydraException, OmegaConfBaseException, ValueError, yaml.YAMLError) as error:
            malformed = _yaml_error(error)
            if malformed is not None:
                raise UserError(describe_yaml_error(malformed)) from None
            raise UserError(describe_composition_error(error, variant)) from None
        assert isinstance(cfg, TrainConfig)
        validate(cfg)
        if not remote:
            check_resources(cfg)


def _yaml_error(error: BaseException) -> Exception | None:
    """The PyYAML error behind a failed composition (Hydra may wrap it), or None."""
    import yaml

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, yaml.YAMLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def describe_yaml_error(error: Exception) -> str:
    """One line naming the file, the line and the problem of a malformed YAML config."""
    import yaml

    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    if (
        isinstance(error, yaml.constructor.ConstructorError)
        and "constructor for the tag" in problem
    ):
        problem += " (YAML tags are not allowed in configs)"
    if mark is None:
        return f"malformed YAML config: {problem}"
    name = mark.name
    if not name.startswith("<"):
        name = str(Path(name).resolve())  # a linked user file: the user's own path
    return f"malformed YAML in {name}, line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _base_config():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train")


def _nearest(word: str, options: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" Did you mean '{prefix}{close[0]}'?" if close else ""


# Hydra plugin choices -> the pyproject extra that installs them.
PLUGIN_EXTRAS = {
    "joblib": "joblib",
    "optuna": "optuna",
    "submitit_slurm": "slurm",
    "submitit_local": "slurm",
}


def describe_composition_error(error: Exception, overrides: list[str]) -> str:
    """One readable message for a failed composition, with the nearest valid name."""
    from omegaconf import DictConfig, OmegaConf

    text = str(error)
    cause = error.__cause__ or error.__context__
    cause_text = str(cause) if cause else ""

    missing_group = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    if missing_group:
        group, choice = missing_group.groups()
        options = re.findall(r"^\t(\S+)$", text, flags=re.MULTILINE)
        if group == "experiment":
            what = f"unknown experiment config={choice}"
        elif group.startswith("hydra/"):
            plugin = group.split("/", 1)[1]
            extra = PLUGIN_EXTRAS.get(choice)
            hint = f"`pip install 'attnseq[{extra}]'`" if extra else "install its Hydra plugin"
            return (
                f"unknown {group}={choice}: the Hydra {plugin} plugin is not installed "
                f"({hint}). Installed: {', '.join(options) or 'none'}"
            )
        else:
            what = f"unknown choice {group}={choice}"
        valid = ", ".join(options) if options else "(none)"
        return f"{what}. Valid: {valid}.{_nearest(choice, options)}"

    full_key = getattr(cause, "full_key", None) or getattr(error, "full_key", None)
    match = re.search(r"Could not override '([^']+)'", text) or re.search(
        r"Could not append to config\. An item is already at '([^']+)'", text
    )
    key = full_key or (match.group(1) if match else None)
    unknown_key = re.search(r"Key '[^']+' (is )?not in", text + "\n" + cause_text)
    if key and unknown_key:
        parent, _, leaf = key.rpartition(".")
        node = _base_config()
        node = OmegaConf.select(node, parent) if parent else node
        options = sorted(node.keys()) if isinstance(node, DictConfig) else []
        where = f"under '{parent}'" if parent else "at the top level"
        return (
            f"unknown config key '{key}'."
            f"{_nearest(leaf, [str(o) for o in options], f'{parent}.' if parent else '')} "
            f"Valid keys {where}: {', '.join(str(o) for o in options)}"
        )
    detail = (cause_text or text).splitlines()[0]
    if key:
        return f"invalid value for '{key}': {detail}"
    return f"invalid configuration ({' '.join(overrides)}): {text.splitlines()[0]}"


def env_world_size() -> int:
    """WORLD_SIZE as torchrun sets it (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


# What ranks other than 0 must not take from the user: where Hydra writes, and its log file.
_WRITING_OVERRIDES = ("hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging=")


def quiet_rank_overrides(args: list[str]) -> list[str]:
    """`args` for a torchrun rank other than 0: Hydra creates and writes nothing (run dir `.`,
    no .hydra/, log to stdout); rank 0 tells the others what they need (distributed.py)."""
    kept = [arg for arg in args if not arg.lstrip("+~").startswith(_WRITING_OVERRIDES)]
    return [*kept, "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]


def run_hydra(args: list[str]) -> None:
    """Hand `args` to the real `hydra.main` entry (multirun, launchers, sweepers included)."""
    import hydra

    from attnseq.config.schema import register_configs

    register_configs()
    if "RANK" in os.environ:  # torchrun's; without it this is rank 0 (and torch stays unloaded)
        from attnseq.training.distributed import env_world

        if not env_world().is_main:
            args = quiet_rank_overrides(args)
    sys.argv = ["attnseq", *args]
    main = hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")(
        _train_task
    )
    main()


def _train_task(composed: Any) -> float | None:
    """The task function: imports the training code (torch) only when Hydra runs a job, so
    `--help`, `--cfg` and shell completion answer without it."""
    from attnseq.cli.train_task import train_from_hydra

    return train_from_hydra(composed)
