"""The train config composed from the command's words (`config=`, overrides) by Hydra, and one
readable message when it does not compose. Hydra and OmegaConf load inside the functions."""

import difflib
import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from attnseq.config import CONFIG_DIR
from attnseq.config.conversion import MOVED_KEYS
from attnseq.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

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
        "(see the packaged configs/experiment/*.yaml)"
    )


def quoted_value(value: str) -> str:
    """`value` as a quoted Hydra override value: any path survives the override grammar."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


def _is_path(value: str) -> bool:
    return value.endswith((".yaml", ".yml")) or "/" in value or os.sep in value


def map_keys() -> tuple[str, ...]:
    """The keys of the schema whose value is a mapping of names the user chooses (e.g.
    data.splits: split -> path), as dotted keys."""
    import dataclasses
    import typing

    from attnseq.config.schema import TrainConfig

    def walk(node: type, prefix: str) -> list[str]:
        found = []
        hints = typing.get_type_hints(node)
        for spec in dataclasses.fields(node):
            kind = hints[spec.name]
            if dataclasses.is_dataclass(kind):
                found += walk(kind, f"{prefix}{spec.name}.")
            elif typing.get_origin(kind) is dict:
                found.append(f"{prefix}{spec.name}")
        return found

    return tuple(walk(TrainConfig, ""))


def _opened_map_override(arg: str, keys: tuple[str, ...]) -> str:
    """`data.splits.valid=dev.tsv` -> `++data.splits.valid=dev.tsv`: a name under a mapping key
    is set whether the data config has it or not (Hydra's plain override only replaces a key
    that is there, its `+` only adds one that is not)."""
    key = arg.split("=", 1)[0]
    if "=" in arg and any(key.startswith(f"{parent}.") for parent in keys):
        return f"++{arg}"
    return arg


def rewrite_config_selector(args: list[str]) -> list[str]:
    """`config=NAME` -> `experiment=NAME`; `config=PATH` -> search path + experiment + the
    path recorded as `config_file`; a plain override of a name under a mapping key
    (`data.splits.valid=dev.tsv`) adds or replaces it."""
    out: list[str] = []
    keys = map_keys()
    for arg in args:
        if arg.startswith("config_file="):
            raise UserError(
                "config_file is set by config=PATH (the experiment file it loaded); "
                "use config=PATH to load a file"
            )
        if not arg.startswith("config="):
            out.append(_opened_map_override(arg, keys))
            continue
        value = arg.split("=", 1)[1]
        if _is_path(value):
            name, root = user_experiment_dir(Path(value))
            out += [
                f"experiment={name}",
                f"hydra.searchpath=[{quoted_value('file://' + str(root))}]",
                f"config_file={quoted_value(str(Path(value).expanduser().absolute()))}",
            ]
        else:
            out.append(f"experiment={value}")
    return out


def compose(args: list[str]) -> "DictConfig":
    """The packaged config composed with `args` (overrides, after `rewrite_config_selector`) by
    Hydra's compose API, its `hydra` node included; UserError naming what does not compose.
    The compose API serves a single run in this process (attnseq.train, the scripts); the
    command line composes through `hydra.main` instead."""
    from hydra import compose, initialize_config_dir

    from attnseq.config.schema import register_configs

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose("train", overrides=args, return_hydra_config=True)
    except composition_errors() as error:
        raise composition_error(error, args) from None


def typed_config(config: "DictConfig") -> "TrainConfig":
    """The TrainConfig of a composed config (its `hydra` node left out); UserError for a value
    the schema refuses."""
    import copy

    from omegaconf import OmegaConf, open_dict

    from attnseq.config.schema import TrainConfig

    task = copy.deepcopy(config)  # `config` keeps the hydra node that Hydra goes on to use
    with open_dict(task):
        task.pop("hydra", None)
    try:
        cfg = OmegaConf.to_object(task)
    except composition_errors() as error:
        required = _raised_user_error(error)  # a `${required:KEY}` left unset (schema.py)
        if required is not None:
            raise required from None
        overrides = list(config.hydra.overrides.task) if "hydra" in config else []
        raise composition_error(error, overrides) from None
    assert isinstance(cfg, TrainConfig)
    return cfg


def _raised_user_error(error: BaseException) -> UserError | None:
    """The UserError a resolver raised inside a failed conversion, or None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, UserError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def directory_setting(node: "DictConfig") -> tuple[Path, bool]:
    """The directory of Hydra's `run` or `sweep` settings, and whether it is time-stamped."""
    from omegaconf import OmegaConf

    setting = OmegaConf.to_container(node, resolve=False)["dir"]
    return Path(str(node.dir)), "${now:" in str(setting)


# Hydra plugin choices -> the pyproject extra that installs them.
PLUGIN_EXTRAS = {
    "joblib": "joblib",
    "optuna": "optuna",
    "submitit_slurm": "slurm",
    "submitit_local": "slurm",
}


def composition_errors() -> tuple[type[BaseException], ...]:
    """What composing a config (or converting it to the schema's dataclasses) raises for a bad
    one."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return (HydraException, OmegaConfBaseException, ValueError, yaml.YAMLError)


# The placeholders of an OmegaConf message before it is formatted: an exception raised inside
# OmegaConf (the cause of the one it reports) holds them ("Value '$VALUE' of type ...").
_UNFILLED = re.compile(r"\$(VALUE|VALUE_TYPE|KEY|FULL_KEY|OBJECT_TYPE|REF_TYPE)\b")


def composition_error(error: BaseException, overrides: list[str]) -> UserError:
    """The UserError for a config that does not compose from `overrides`: a malformed YAML file,
    overrides that do not parse, or what `describe_composition_error` makes of the rest."""
    from hydra.errors import OverrideParseException

    malformed = yaml_error(error)
    if malformed is not None:
        return UserError(describe_yaml_error(malformed))
    if isinstance(error, OverrideParseException):
        return UserError(f"cannot parse the overrides: {str(error).splitlines()[0]}")
    return UserError(describe_composition_error(error, overrides))


def yaml_error(error: BaseException) -> Exception | None:
    """The PyYAML error behind a failed composition (Hydra may wrap it), or None."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, yaml.YAMLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def describe_yaml_error(error: Exception) -> str:
    """One line naming the file, the line and the problem of a malformed YAML config."""
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


def _base_config() -> "DictConfig":
    """The default composed config, whose keys an unknown key is compared with (composed by the
    running Hydra inside `hydra.main`, by a Hydra of its own elsewhere)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose("train")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train")


def _nearest(word: str, options: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" Did you mean '{prefix}{close[0]}'?" if close else ""


def describe_composition_error(error: BaseException, overrides: list[str]) -> str:
    """One readable message for a failed composition, with the nearest valid name."""
    text = str(error)
    not_mapping = re.match(r"In '([^']+)': ConfigTypeError.*\n.*with ListConfig", text)
    if not_mapping:
        return _describe_list_file(not_mapping.group(1), overrides)
    cause = error.__cause__ or error.__context__
    cause_text = str(cause) if cause else ""
    missing_group = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    if missing_group:
        return _describe_missing_choice(*missing_group.groups(), text)
    full_key = getattr(cause, "full_key", None) or getattr(error, "full_key", None)
    match = re.search(r"Could not override '([^']+)'", text) or re.search(
        r"Could not append to config\. An item is already at '([^']+)'", text
    )
    key = full_key or (match.group(1) if match else None)
    unknown_key = re.search(r"Key '[^']+' (is )?not in", text + "\n" + cause_text)
    if key and unknown_key:
        return _describe_unknown_key(key)
    detail = (cause_text or text).splitlines()[0]
    if _UNFILLED.search(detail) and not _UNFILLED.search(text):
        detail = text.splitlines()[0]  # the cause is OmegaConf's template; the error filled it
    choice = re.search(r"Invalid value '([^']*)', expected one of \[([^\]]*)\]", detail)
    if choice:  # an Enum field (a list's item too): the nearest valid name
        detail += _nearest(choice.group(1), choice.group(2).split(", "))
    if key and "is not a ListConfig, list or tuple" in detail:
        given = [arg.split("=", 1)[1] for arg in overrides if arg.startswith(f"{key}=")]
        items = given[-1] if given else "A,B"
        return f"invalid value for '{key}': it takes a list in brackets, e.g. {key}=[{items}]"
    if key:
        return f"invalid value for '{key}': {detail}"
    return f"invalid configuration ({' '.join(overrides)}): {text.splitlines()[0]}"


def _describe_list_file(config: str, overrides: list[str]) -> str:
    """A config file whose top level is a YAML list: it must map keys to values. `config` is
    Hydra's name for it (group/name); a user's experiment file is named by its own path, which
    the `config_file=` override records."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = CONFIG_DIR / f"{config}.yaml"
    given = [arg for arg in overrides if arg.startswith("config_file=")]
    if config.startswith("experiment/") and not path.is_file() and given:
        path = Path(str(OverridesParser.create().parse_override(given[-1]).value()))
    return (
        f"config file {path}: its top level is a list, but it must be a mapping of keys to "
        "values (e.g. `model: {family: transformer}`)"
    )


def _describe_missing_choice(group: str, choice: str, text: str) -> str:
    """An unknown choice of a config group (Hydra's message `text` lists the valid ones)."""
    options = re.findall(r"^\t(\S+)$", text, flags=re.MULTILINE)
    if group.startswith("hydra/"):
        plugin = group.split("/", 1)[1]
        extra = PLUGIN_EXTRAS.get(choice)
        hint = f"`pip install 'attnseq[{extra}]'`" if extra else "install its Hydra plugin"
        return (
            f"unknown {group}={choice}: the Hydra {plugin} plugin is not installed "
            f"({hint}). Installed: {', '.join(options) or 'none'}"
        )
    if group == "experiment":
        what = f"unknown experiment config={choice}"
    else:
        what = f"unknown choice {group}={choice}"
    valid = ", ".join(options) if options else "(none)"
    return f"{what}. Valid: {valid}.{_nearest(choice, options)}"


def _describe_unknown_key(key: str) -> str:
    """An unknown config key, with the keys valid beside it and the nearest of them."""
    from omegaconf import DictConfig, OmegaConf

    parent, _, leaf = key.rpartition(".")
    node = _base_config()
    node = OmegaConf.select(node, parent) if parent else node
    keys = list(node.keys()) if isinstance(node, DictConfig) else []
    options = sorted(str(key) for key in keys)
    where = f"under '{parent}'" if parent else "at the top level"
    if parent in map_keys():  # a name of the user's: Hydra adds one with a leading +
        return (
            f"'{parent}' has no key '{leaf}' in this config: add it with a leading +, "
            f"+{key}=VALUE (or ++{key}=VALUE to add or replace it)"
        )
    moved = MOVED_KEYS.get(key)  # a key of older configs: where it is now
    nearest = (
        f" Did you mean '{moved}'?"
        if moved
        else _nearest(leaf, options, f"{parent}." if parent else "")
    )
    return f"unknown config key '{key}'.{nearest} Valid keys {where}: {', '.join(options)}"
