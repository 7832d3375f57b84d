"""The checks a training run passes before it writes anything, each run once: the config's own,
this machine's, the data files', then its run directory (docs/internals/training.md)."""

import copy
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from attnseq.config.composition import directory_setting, typed_config
from attnseq.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

# The run the last `check_run` of this process passed: a copy of its config and its run
# directory, resolved. It is the run that starts next (the task Hydra calls after its
# callback, the training `attnseq.train` starts), which checks neither again (`passed`).
_passed: "tuple[TrainConfig, Path] | None" = None
# The folders the start of that run creates, deepest first: its run directory and the folders
# above it that did not exist before (outputs/DATE/ of outputs/DATE/TIME), by the resolved run
# directory; what a start that is refused removes (`remove_refused_start`).
_created: tuple[Path, list[Path]] | None = None


def passed(cfg: "TrainConfig", run_dir: Path) -> bool:
    """Whether the last `check_run` passed this run: a config equal to `cfg`, into `run_dir`."""
    return _passed is not None and _passed[1] == run_dir.resolve() and _passed[0] == cfg


def check_config_once(cfg: "TrainConfig", run_dir: Path) -> None:
    """The checks of the config itself (the cross-field checks, the trackers' libraries) for a
    run that `check_run` did not pass: `run_training` called directly, a sweep's job. The
    record of the run `check_run` passed is used up."""
    global _passed
    checked = passed(cfg, run_dir)
    _passed = None
    if checked:
        return
    from attnseq.config.checks import validate
    from attnseq.training.trackers import check_trackers_installed

    validate(cfg)
    check_trackers_installed(cfg.logger)


def check_job(config: "DictConfig", on_this_machine: bool = True) -> "TrainConfig":
    """The typed config of a composed job once it passed the cross-field checks, the resource
    checks and the trackers' libraries (for a job that runs on this machine) and the data
    files' presence; UserError naming the first problem."""
    from attnseq.config.checks import validate
    from attnseq.config.resources import check_resources
    from attnseq.training.initialization import pretrained_vocabularies
    from attnseq.training.trackers import check_trackers_installed

    cfg = run_config(config)
    validate(cfg)
    if on_this_machine:  # a pretrained model's vocabularies are the run's
        source = cfg.model.init_from
        check_resources(cfg, pretrained_vocabularies(source) if source else None)
        check_trackers_installed(cfg.logger)
        _check_tracking_store(cfg)
    _check_data_files(cfg)
    return cfg


def run_config(config: "DictConfig") -> "TrainConfig":
    """The typed config a composed job runs with: the model.* of `model.init_from` where it
    names a pretrained model, checked against the task overrides (initialization.py)."""
    from attnseq.training.initialization import initialized_config

    given = [str(item) for item in config.hydra.overrides.task] if "hydra" in config else []
    return initialized_config(typed_config(config), given)


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
    global _passed, _created
    from attnseq.training.distributed import env_world
    from attnseq.training.run_directory import acquire, claim_fresh

    _passed = _created = None
    cfg = check_job(config)
    created: list[Path] = []
    if env_world().is_main:  # torchrun's other ranks write no run directory
        run_dir, timestamped = directory_setting(config.hydra.run)
        named = run_dir.absolute()
        created = [folder for folder in (named, *named.parents) if not folder.exists()]
        if timestamped:
            if cfg.resume != "auto":  # resume=auto in a fresh folder starts fresh
                _check_resume(cfg, run_dir)
            claimed = claim_fresh(run_dir)
            if claimed.absolute() != named:  # DIR_2 beside a name another run has taken
                created.insert(0, claimed.absolute())
            config.hydra.run.dir = str(claimed)
        else:
            check_job_directory(run_dir, cfg, elsewhere)
            if lock:
                acquire(run_dir)
    resolved = Path(str(config.hydra.run.dir)).resolve()
    _passed, _created = (copy.deepcopy(cfg), resolved), (resolved, created)
    return cfg


def created_by_start(run_dir: Path) -> list[Path]:
    """The folders the start of the run into `run_dir` creates, deepest first, when
    `check_run` passed that run; [] for any other run directory."""
    if _created is None or _created[0] != run_dir.resolve():
        return []
    return list(_created[1])


def remove_refused_start(run_dir: Path, created: list[Path]) -> None:
    """After a start that was refused (a UserError before training wrote anything): the run
    directory and the folders above it, deepest first, as far as the start created them
    (`created`, from `created_by_start`) and they hold nothing else: a run directory with
    run outputs stays, and so does a folder another run has meanwhile started in."""
    from attnseq.training.run_directory import run_outputs

    if run_dir.absolute() not in created or run_outputs(run_dir):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for folder in created:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            continue


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
