"""From the command's words to a checked run: the `config=` selector and the checks a single
run passes before it writes anything. `attnseq train` (through Hydra's own entry and its
callback, attnseq/cli/) and `attnseq.train` (Hydra's compose API, attnseq/api/train.py) both use
them, so a run starts the same way from either; Hydra's composition errors become one message
in config_errors.py.

`config=NAME` selects the packaged configs/experiment/NAME.yaml; `config=PATH` (a path ending in
.yaml or .yml, or containing a `/`) loads the user's own experiment file, always: it is linked
into a private search-path folder under a name no packaged experiment can have
(`user_file__...`), so it can use the packaged config groups in its defaults list like any
packaged experiment, and its absolute path is recorded in the composed config as `config_file`.

The checks of a single run (`check_run`): the cross-field checks, the resource checks (memory
estimate), the trackers' libraries and store, the data files found and readable; then its run
directory. A time-stamped directory (one whose setting uses `${now:...}`, as the default
outputs/DATE/TIME does) belongs to one run: it is created here, and when a run started in the
same second already has it, the first free of DIR_2, DIR_3, ... is taken instead. Any other
directory is checked: a running training there, a run it holds that the new one neither resumes
nor replaces (run_directory.py), and the resume checkpoint's agreement with the config
(resume.py); it is then locked.
"""

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from attnseq.errors import UserError
from attnseq.training.config_errors import COMPOSITION_ERRORS, composition_error

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

    from attnseq.config import CONFIG_DIR
    from attnseq.config.schema import register_configs

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose("train", overrides=args, return_hydra_config=True)
    except COMPOSITION_ERRORS as error:
        raise composition_error(error, args) from None


def check_job(config: "DictConfig", on_this_machine: bool = True) -> "TrainConfig":
    """The typed config of a composed job once it passed the cross-field checks, the resource
    checks and the trackers' libraries (for a job that runs on this machine) and the data
    files' presence; UserError naming the first problem."""
    from attnseq.config.checks import validate
    from attnseq.config.resources import check_resources
    from attnseq.training.trackers import check_trackers_installed

    cfg = typed_config(config)
    validate(cfg)
    if on_this_machine:
        check_resources(cfg)
        check_trackers_installed(cfg.logger)
        _check_tracking_store(cfg)
    _check_data_files(cfg)
    return cfg


def _check_tracking_store(cfg: "TrainConfig") -> None:
    """An MLflow store named as an existing SQLite file must be one SQLite can read: a
    damaged or foreign file would fail inside MLflow once the run directory exists."""
    import sqlite3

    from attnseq.config.choices import Tracker

    uri = cfg.tracker.mlflow_tracking_uri or ""
    if Tracker.mlflow not in cfg.logger or not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    if not path.exists():
        return  # MLflow creates it
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as store:
            store.execute("PRAGMA schema_version").fetchone()
    except sqlite3.Error as error:
        raise UserError(
            f"tracker.mlflow_tracking_uri={uri}: {path} is not a readable SQLite database "
            f"({error}); name another file, or move this one aside"
        ) from None


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
    except COMPOSITION_ERRORS as error:
        overrides = list(config.hydra.overrides.task) if "hydra" in config else []
        raise composition_error(error, overrides) from None
    assert isinstance(cfg, TrainConfig)
    return cfg


def _check_data_files(cfg: "TrainConfig") -> None:
    """Every local data file exists and can be opened, before a run directory is made."""
    from attnseq.config.choices import DataSource
    from attnseq.data.sources import split_files

    if cfg.data.source is not DataSource.local or not cfg.data.splits:
        return
    for paths in split_files(cfg.data).values():
        for path in paths:
            try:
                with open(path, "rb"):
                    pass
            except OSError as error:
                raise UserError(f"cannot read data file {path}: {error.strerror}") from None


def check_run(
    config: "DictConfig", lock: bool = True, elsewhere: str = "hydra.run.dir=DIR"
) -> "TrainConfig":
    """The checks of a single run; returns its typed config. Rank 0 then claims a fresh
    time-stamped run directory (and points `hydra.run.dir` at it), or checks the directory the
    user named and, with `lock`, locks it for the rest of the process (before Hydra writes its
    record there; training takes the lock again, locks nest). `elsewhere` is how the user
    names another run directory, in the refusals (`attnseq.train`: its run_dir argument)."""
    from attnseq.training.distributed import env_world
    from attnseq.training.run_directory import acquire

    cfg = check_job(config)
    if not env_world().is_main:
        return cfg  # torchrun's other ranks write no run directory
    run_dir, timestamped = directory_setting(config.hydra.run)
    if timestamped:
        if cfg.resume != "auto":  # resume=auto in a fresh folder starts fresh: nothing to check
            _check_resume(cfg, run_dir)
        config.hydra.run.dir = str(claim_fresh(run_dir))
        return cfg
    check_job_directory(run_dir, cfg, elsewhere)
    if lock:
        acquire(run_dir)
    return cfg


def directory_setting(node: "DictConfig") -> tuple[Path, bool]:
    """The directory of Hydra's `run` or `sweep` settings, and whether it is time-stamped."""
    from omegaconf import OmegaConf

    setting = OmegaConf.to_container(node, resolve=False)["dir"]
    return Path(str(node.dir)), "${now:" in str(setting)


def check_job_directory(
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


def claim_fresh(path: Path) -> Path:
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
