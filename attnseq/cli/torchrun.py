"""What the command line needs to know about torchrun: whether this process is one of several,
and what a rank other than 0 keeps Hydra from writing.

Torchrun always sets RANK in its workers' environment, so without it the answer needs no torch;
with it, `attnseq.training.distributed.env_world` (which imports torch) reads the world.
"""

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnseq.training.distributed import WorldInfo


def torchrun_world() -> "WorldInfo | None":
    """The world torchrun describes, or None in a process torchrun did not start."""
    if "RANK" not in os.environ:
        return None
    from attnseq.training.distributed import env_world

    return env_world()


# What ranks other than 0 must not take from the user: where Hydra writes, and its log file.
_WRITING_OVERRIDES = ("hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging=")


def quiet_rank_overrides(args: list[str]) -> list[str]:
    """`args` for a torchrun rank other than 0: Hydra creates and writes nothing (run dir `.`,
    no .hydra/, log to stdout); rank 0 tells the others what they need (distributed.py)."""
    kept = [arg for arg in args if not arg.lstrip("+~").startswith(_WRITING_OVERRIDES)]
    return [*kept, "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
