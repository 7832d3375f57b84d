"""`attnseq.train`: one training from Python, composed as `attnseq train` composes it."""

import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attnseq.api import arguments
from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError
from attnseq.io.progress import in_notebook
from attnseq.training.callbacks import Callback, check_callbacks
from attnseq.training.stopping import TrainingInterrupted

if TYPE_CHECKING:
    from omegaconf import DictConfig

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

    def __repr__(self) -> str:
        """One line: the run directory and the first `REPR_METRICS` metrics (4 significant
        digits), with how many more there are."""
        shown = ", ".join(
            f"{name!r}: {value:.4g}" if isinstance(value, float) else f"{name!r}: {value!r}"
            for name, value in list(self.metrics.items())[:REPR_METRICS]
        )
        more = len(self.metrics) - REPR_METRICS
        if more > 0:
            shown += f", ... {more} more"
        return f"TrainResult(run_dir={str(self.run_dir)!r}, metrics={{{shown}}})"


REPR_METRICS = 4  # the metrics a TrainResult's repr shows


def train(
    overrides: Iterable[str] = (),
    run_dir: str | Path | None = None,
    *,
    progress: bool | None = None,
    verbose: bool = True,
    callbacks: Sequence[Callback] = (),
) -> TrainResult:
    """Train one model: `overrides` are what follows `attnseq train` on the command line
    (key=value, group=option, config=NAME or config=PATH.yaml); `run_dir` is where the run
    goes (default: the config's outputs/DATE/TIME, created fresh), given here or as the
    override hydra.run.dir=DIR, not both.

    Args:
        progress: a bar with the updates, loss and ETA: True on stderr whatever it is (a
            widget in a notebook with ipywidgets, else text), False none, None (default)
            when the call is interactive (a notebook kernel, a terminal), `verbose` is on and
            trainer.progress is not false.
        verbose: the "attnseq" logger's lines (the run's header, validation results, the
            periodic training lines) on the caller's stderr besides train.log, and the test
            metrics printed at the end; False: nothing but errors (train.log has it all).
        callbacks: objects with `on_update`, `on_validation` and/or `on_end` (subclass
            `attnseq.Callback`): they hear of each update and validation and may end the
            run early (the run then ends as an early stop does: checkpoints, test, result).

    Raises:
        TypeError: `overrides` is not a list of str (a lone str included), `run_dir` is not
            a str or path, `progress`/`verbose` not True or False, a callback without any of
            the methods.
        UserError: an invalid override or config, a sweep (several values of a key), both
            run_dir and hydra.run.dir, a run directory in use or holding another run, missing
            or unreadable data (the run directory this call made is then removed).
        TrainingInterrupted: a Ctrl-C (SIGINT) or SIGTERM; a KeyboardInterrupt whose message
            says what was saved and the `attnseq.train(...)` call that resumes the run
            (also its `resume` attribute).
        TrainingDiverged: as `attnseq.training.run.run_training`.
    """
    from attnseq.config.composition import compose, quoted_value, rewrite_config_selector
    from attnseq.training.run_checks import check_run, created_by_start, remove_refused_start

    given = arguments.strings(overrides, "overrides", "['trainer.max_steps=10']")
    folder = arguments.path(run_dir, "run_dir", optional=True)
    asked = Watching(
        None if progress is None else arguments.flag(progress, "progress"),
        arguments.flag(verbose, "verbose"),
        check_callbacks(callbacks, "callbacks"),
    )
    args = rewrite_config_selector(given)
    if folder is not None:
        _refuse_second_run_dir(args, folder)
        args.append(f"hydra.run.dir={quoted_value(str(folder.absolute()))}")
    _refuse_sweeps(args)
    config = compose(args)
    elsewhere = "run_dir=DIR" if folder is not None else "hydra.run.dir=DIR"
    cfg = check_run(config, lock=False, elsewhere=elsewhere)  # run_training locks it
    directory = Path(str(config.hydra.run.dir))
    created = created_by_start(directory)
    try:
        with _process_settings_kept():
            metrics = _run(cfg, config, given, directory, asked)
    except UserError:
        remove_refused_start(directory, created)
        raise
    except TrainingInterrupted as interruption:
        _tell_resume(interruption, given, directory, asked)
        raise
    return TrainResult(directory, metrics)


@dataclass(frozen=True)
class Watching:
    """How the caller of `train` watches the run: its progress, verbose and callbacks."""

    progress: bool | None
    verbose: bool
    callbacks: list[Any]

    def bar(self, cfg: TrainConfig) -> bool:
        """Whether the training bar is drawn (on stderr, whatever it is)."""
        if self.progress is not None:
            return self.progress
        return self.verbose and cfg.trainer.progress and (in_notebook() or sys.stderr.isatty())


@contextmanager
def _process_settings_kept() -> Iterator[None]:
    """Put back, after the block, what training sets for the whole process: torch's CPU
    threads (trainer.threads), the TF32 switches (trainer.tf32), the random-number states
    (seed: torch's, Python's `random`, CUDA's where it was in use before)."""
    from attnseq.training.state import rng_state, set_rng_state

    threads = torch.get_num_threads()
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    generators = rng_state()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        set_rng_state(generators)


def _tell_resume(
    interruption: TrainingInterrupted, given: list[str], directory: Path, asked: Watching
) -> None:
    """The interruption's message in Python's words: what was saved, and the `attnseq.train`
    call that continues the run (the same overrides with resume=auto, in `directory`)."""
    from attnseq.training.resume import interruption_message

    dropped = ("resume=", "trainer.overwrite=", "hydra.run.dir=")  # set here / would replace it
    kept = [arg for arg in given if not arg.lstrip("+~").startswith(dropped)]
    words = [repr([*kept, "resume=auto"]), f"run_dir={str(directory.absolute())!r}"]
    if asked.progress is not None:
        words.append(f"progress={asked.progress!r}")
    if not asked.verbose:
        words.append("verbose=False")
    call = f"attnseq.train({', '.join(words)})"
    if asked.callbacks:
        call = call[:-1] + ", callbacks=[...])  # the same callbacks"
    interruption.tell(interruption_message(interruption, directory, call), call)


def _run(
    cfg: "TrainConfig",
    config: "DictConfig",
    overrides: list[str],
    directory: Path,
    asked: Watching,
) -> dict[str, float]:
    """Hydra's record of the run in `directory`, then the training, logging to train.log
    (and to the caller, as `asked`)."""
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
    with _train_log(directory / "train.log", asked.verbose):
        return run_training(
            cfg,
            directory,
            callbacks=asked.callbacks,
            progress=asked.bar(cfg),
            summary=asked.verbose,
        )


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
def _train_log(path: Path, verbose: bool) -> Iterator[None]:
    """The "attnseq" logger's INFO lines go to `path` while the block runs, and:

    - `verbose`: to the caller's stderr as well, unless a handler of the caller's logging
      shows them already (`logging.basicConfig(level=logging.INFO)` and the like: a plain
      StreamHandler on the way up with a level that lets INFO through);
    - not `verbose`: to the caller's stderr at ERROR only, and not on to the caller's own
      handlers (the logger does not propagate meanwhile): silence apart from errors.
    """
    logger = logging.getLogger("attnseq")
    added: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
    if not (verbose and _info_shown(logger)):
        added.append(logging.StreamHandler(sys.stderr))  # now's: a notebook cell's, a capture
        added[-1].setLevel(logging.INFO if verbose else logging.ERROR)
    previous, propagates = logger.level, logger.propagate
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.propagate = propagates and verbose
    for each in added:
        each.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(each)
    try:
        yield
    finally:
        for each in added:
            logger.removeHandler(each)
            each.close()
        logger.setLevel(previous)
        logger.propagate = propagates


def _info_shown(logger: logging.Logger) -> bool:
    """Whether a plain StreamHandler (a console's: basicConfig's) on `logger`'s way up shows
    its INFO records. Files and capture handlers (pytest's, subclasses) do not count."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if type(handler) is logging.StreamHandler and handler.level <= logging.INFO:
                return True
        current = current.parent if current.propagate else None
    return False
