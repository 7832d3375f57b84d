"""`attnseq.train(overrides=[...])`: one training from Python (a notebook, a script), composed
from the packaged config exactly as `attnseq train OVERRIDES` composes it, run in this process,
and returning the run directory and the test metrics.

Why in cli/. Composing the packaged YAML groups needs Hydra, and library code never imports
Hydra (tests/test_layout.py); the command-line layer is the one layer that does. The steps are
the command's own: Hydra's compose API composes the config once, `check_run` (preflight.py, the
checks `attnseq train` runs in its Hydra callback) validates it, checks the resources and the
data and creates the time-stamped run directory (or checks the one given), and then
`attnseq.training.run.run_training` trains, as the task function of `attnseq train` does
(hydra_entry.py). What `hydra.main` adds on the command line (multirun, launchers, sweepers,
`--cfg`) is left out: a sweep is refused here, run it with `attnseq train -m`. The compose API
is the right tool for a single run in-process: it needs no command line to rewrite and leaves
no global state behind.

The run directory gets what `attnseq train` leaves there: train.log (the "attnseq" logger's
lines, in Hydra's log format), .hydra/config.yaml (the resolved config) and
.hydra/overrides.yaml, besides what training writes (checkpoints/, tb/, metrics.json, ...).

The arguments are checked first (TypeError for a wrong type, as in every function of the
Python API: attnseq/evaluation/arguments.py). A training that refuses to start (a UserError
before it wrote any output, e.g. data that cannot be read) removes the run directory the call
created, and the folders above it that it created (outputs/DATE/), so a refusal leaves nothing
behind. torch's CPU thread count, which training sets from trainer.threads, is put back to the
caller's when the call returns or raises.
"""

import logging
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnseq.cli.hydra_entry import quoted_value, rewrite_config_selector
from attnseq.cli.preflight import check_run
from attnseq.errors import UserError
from attnseq.evaluation import arguments
from attnseq.training.run_directory import run_outputs

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from attnseq.config.schema import TrainConfig

# Hydra's default job-logging format, so a run's train.log reads the same from either entry
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


@dataclass(frozen=True)
class TrainResult:
    """What `train` returns: the run directory and the metrics of its metrics.json (test
    metrics of the best checkpoint, e.g. "test/exact_match")."""

    run_dir: Path
    metrics: dict[str, float]

    @property
    def checkpoint(self) -> Path:
        """The run's best checkpoint, RUN/checkpoints/best.pt (what `attnseq.load` takes)."""
        return self.run_dir / "checkpoints" / "best.pt"


def train(overrides: Iterable[str] = (), run_dir: str | Path | None = None) -> TrainResult:
    """Train one model: `overrides` are what follows `attnseq train` on the command line
    (key=value, group=option, config=NAME or config=PATH.yaml); `run_dir` is where the run
    goes (default: the config's outputs/DATE/TIME, created fresh), given here or as the
    override hydra.run.dir=DIR, not both.

    Raises:
        TypeError: `overrides` is not a list of str (a lone str included), or `run_dir` is
            not a str or path.
        UserError: an invalid override or config, a sweep (several values of a key), both
            run_dir and hydra.run.dir, a run directory in use or holding another run, missing
            or unreadable data (the run directory this call made is then removed).
        TrainingInterrupted, TrainingDiverged: as `attnseq.training.run.run_training`.
    """
    import torch

    given = arguments.strings(overrides, "overrides", "['trainer.max_steps=10']")
    folder = arguments.path(run_dir, "run_dir", optional=True)
    args = rewrite_config_selector(given)
    if folder is not None:
        _refuse_second_run_dir(args, folder)
        args.append(f"hydra.run.dir={quoted_value(str(folder.absolute()))}")
    _refuse_sweeps(args)
    config = _compose(args)
    named = Path(str(config.hydra.run.dir)).absolute()
    missing = [folder for folder in (named, *named.parents) if not folder.exists()]
    cfg = check_run(config, lock=False)  # run_training locks the run directory
    directory = Path(str(config.hydra.run.dir))
    if directory.absolute() != named:  # check_run claimed a fresh one beside a taken name
        missing.insert(0, directory.absolute())
    threads = torch.get_num_threads()
    try:
        metrics = _run(cfg, config, given, directory)
    except UserError:
        _remove_refused(directory, missing)
        raise
    finally:
        torch.set_num_threads(threads)
    return TrainResult(directory, metrics)


def _remove_refused(directory: Path, created: list[Path]) -> None:
    """After a refused start: the run directory and the folders above it, deepest first, as
    far as this call created them and they hold nothing else (no run outputs)."""
    if directory.absolute() not in created or run_outputs(directory):
        return
    shutil.rmtree(directory, ignore_errors=True)
    for folder in created:
        try:
            folder.rmdir()  # only when empty: another run may have started beside this one
        except OSError:
            continue


def _run(
    cfg: "TrainConfig", config: "DictConfig", overrides: list[str], directory: Path
) -> dict[str, float]:
    """Hydra's record of the run in `directory`, then the training, logging to train.log."""
    from omegaconf import OmegaConf

    from attnseq.config.conversion import config_to_dict
    from attnseq.io.atomic import atomic_write_text
    from attnseq.training.run import run_training

    record = directory / ".hydra"
    try:
        record.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {record}: {error.strerror}") from None
    atomic_write_text(record / "config.yaml", OmegaConf.to_yaml(config_to_dict(cfg)))
    atomic_write_text(record / "overrides.yaml", OmegaConf.to_yaml(overrides))
    with _train_log(directory / "train.log"):
        return run_training(cfg, directory)


def _refuse_second_run_dir(args: list[str], run_dir: Path) -> None:
    """UserError when an override also names the run directory: the two would disagree, and
    which one wins would be a guess."""
    for arg in args:
        key = arg.split("=", 1)[0].lstrip("+~").strip()
        if key == "hydra.run.dir":
            raise UserError(
                f"run_dir={str(run_dir)!r} and the override {arg} both name the run "
                "directory: give one of them"
            )


def _compose(args: list[str]) -> "DictConfig":
    """The packaged config composed with `args`, its `hydra` node included; UserError naming
    what does not compose."""
    from hydra import compose, initialize_config_dir

    from attnseq.cli.config_errors import COMPOSITION_ERRORS, composition_error
    from attnseq.config import CONFIG_DIR
    from attnseq.config.schema import register_configs

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose("train", overrides=args, return_hydra_config=True)
    except COMPOSITION_ERRORS as error:
        raise composition_error(error, args) from None


def _refuse_sweeps(args: list[str]) -> None:
    """UserError for an override with several values: one call trains one model."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except OverrideParseException as error:
        raise UserError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    swept = [override.input_line for override in parsed if override.is_sweep_override()]
    if swept:
        raise UserError(
            f"attnseq.train trains one model, but {swept[0]} sweeps several values: call it "
            "once per value, or run the sweep with `attnseq train -m`"
        )


@contextmanager
def _train_log(path: Path) -> Iterator[None]:
    """The "attnseq" logger's INFO lines also go to `path` while the block runs."""
    logger = logging.getLogger("attnseq")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    previous = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        handler.close()
