"""attnseq: sequence-to-sequence experiments with attention.

The Python API, small and stable (the "Python API" page of the documentation):

    import attnseq
    model = attnseq.load("outputs/DATE/TIME/checkpoints/best.pt")   # or the run directory
    result = model.translate("June 5, 2001", beam=5, attention=True)
    figure = attnseq.plot_alignment(result.hypotheses[0])
    model.score("June 5, 2001", "2001-06-05")
    model.align(["a b"], ["x y"], method="shift-att")
    run = attnseq.train(overrides=["trainer.max_steps=10"])         # run.run_dir, run.metrics

`import attnseq` stays cheap: the names below are imported on first use (module
`__getattr__`, PEP 562), so torch, Hydra and the model code load only when one is used.
"""

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_API = {
    "load": "attnseq.api",
    "Model": "attnseq.api",
    "Translation": "attnseq.api",
    "TranslatedHypothesis": "attnseq.api",
    "plot_alignment": "attnseq.api",
    "train": "attnseq.api",
    "TrainResult": "attnseq.api",
    "UserError": "attnseq.errors",
}

__all__ = [
    "Model",
    "TrainResult",
    "TranslatedHypothesis",
    "Translation",
    "UserError",
    "__version__",
    "load",
    "plot_alignment",
    "train",
]

if TYPE_CHECKING:
    from attnseq.api import (
        Model,
        TrainResult,
        TranslatedHypothesis,
        Translation,
        load,
        plot_alignment,
        train,
    )
    from attnseq.errors import UserError


def __getattr__(name: str) -> Any:
    """Import the API name `name` from its module on first use, and keep it here."""
    if name not in _API:
        raise AttributeError(f"module 'attnseq' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
