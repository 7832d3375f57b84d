"""Which run directories a training may write into: one run per directory.

A run directory holds a run once a training has written its outputs there (`RUN_OUTPUTS`):
checkpoints, TensorBoard events, hypotheses, metrics.json, or the evaluations `attnseq eval`
wrote beside them. A new training there would mix its files with the old run's or replace them,
so it must say what it means: `resume=auto` continues the run, `trainer.overwrite=true` replaces
it (`clear_previous_run` deletes the old outputs once the new run has its data and model), and
anything else is refused (`check_run_directory`). Hydra's record (.hydra/) and train.log are not
outputs: a start that failed before training wrote them and may simply be started again.
"""

import logging
import shutil
from pathlib import Path

from attnseq.errors import UserError
from attnseq.io.output_paths import check_output_folder

log = logging.getLogger("attnseq")

# What a training (and `attnseq eval` of its checkpoints) writes into its run directory.
RUN_OUTPUTS = ("checkpoints", "tb", "hyps", "eval", "metrics.json")


def run_outputs(run_dir: Path) -> list[str]:
    """The names of `RUN_OUTPUTS` present in `run_dir` (an empty folder does not count)."""
    found = []
    for name in RUN_OUTPUTS:
        path = run_dir / name
        if path.is_dir():
            if any(path.iterdir()):
                found.append(name)
        elif path.exists():
            found.append(name)
    return found


def continues_run(resume: str | None, run_dir: Path) -> bool:
    """Whether `resume` continues the run in `run_dir`: resume=auto, or one of its own
    checkpoints (RUN_DIR/checkpoints/NAME.pt)."""
    if resume is None:
        return False
    if resume == "auto":
        return True
    checkpoint_folder = Path(resume).expanduser().absolute().parent
    return checkpoint_folder == (run_dir / "checkpoints").absolute()


def check_run_directory(
    run_dir: Path, resume: str | None, overwrite: bool, elsewhere: str = "hydra.run.dir=DIR"
) -> None:
    """Refuse a training into `run_dir` that would mix with (or replace) the run it holds,
    unless `resume` continues that run or `overwrite` replaces it.

    `elsewhere` is the override that chooses another directory (in a sweep, hydra.sweep.dir).

    Raises:
        UserError: `run_dir` is a file or cannot be written into; or one line naming the
            run's outputs and the three ways on.
    """
    check_output_folder(run_dir, elsewhere.split("=")[0])
    found = run_outputs(run_dir)
    if not found or overwrite or continues_run(resume, run_dir):
        return
    started = f"resume={resume} starts from another run's checkpoint; " if resume else ""
    raise UserError(
        f"run directory {run_dir} already holds a run ({', '.join(found)}); {started}continue "
        f"it with resume=auto, start the new run elsewhere with another {elsewhere}, or replace "
        "it with trainer.overwrite=true"
    )


def clear_previous_run(run_dir: Path) -> list[str]:
    """Delete the outputs of the run that `run_dir` holds (`RUN_OUTPUTS`; their folders stay,
    emptied, so a folder that is a link to other storage keeps its link). Returns their names.
    Everything else in `run_dir` (Hydra's record, train.log, the user's own files) stays."""
    found = run_outputs(run_dir)
    for name in found:
        path = run_dir / name
        children = list(path.iterdir()) if path.is_dir() else [path]
        for child in children:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    if found:
        log.info(
            "trainer.overwrite=true: deleted the previous run's %s in %s", ", ".join(found), run_dir
        )
    return found
