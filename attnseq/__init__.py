"""attnseq: sequence-to-sequence experiments with attention.

The Python API, small and stable (the "Python API" page of the documentation):

    import attnseq
    model = attnseq.load("outputs/DATE/TIME/checkpoints/best.pt")   # or the run directory
    result = model.translate("June 5, 2001", beam=5, attention=True)
    figure = attnseq.plot_alignment(result.hypotheses[0])
    model.score("June 5, 2001", "2001-06-05")
    model.align(["a b"], ["x y"], method="shift-att")
    run = attnseq.train(overrides=["trainer.max_steps=10"])         # run.run_dir, run.metrics
    attnseq.train([...], callbacks=[MyCallback()])    # subclass attnseq.Callback: watch, stop

`import attnseq` stays cheap: the names below are imported on first use (module
`__getattr__`, PEP 562), so torch, Hydra and the model code load only when one is used.
"""

# private names: `dir(attnseq)` and `from attnseq import *` give the API alone
import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

# public name -> the module that defines it
_API = {
    "load": "attnseq.api.model",
    "Model": "attnseq.api.model",
    "Translation": "attnseq.api.results",
    "TranslatedHypothesis": "attnseq.api.results",
    "plot_alignment": "attnseq.api.plotting",
    "train": "attnseq.api.train",
    "TrainResult": "attnseq.api.train",
    "compare": "attnseq.api.compare",
    "Comparison": "attnseq.analysis.comparison",
    "SeedComparison": "attnseq.analysis.seed_comparison",
    "Callback": "attnseq.training.callbacks",
    "TrainingEvent": "attnseq.training.callbacks",
    "TrainingInterrupted": "attnseq.training.stopping",
    "UserError": "attnseq.errors",
}

# `from attnseq import *`: the names of the table above
__all__ = ["__version__", *_API]

if _typing.TYPE_CHECKING:
    # `X as X`: a re-export to type checkers and linters, which cannot read the built __all__
    from attnseq.analysis.comparison import Comparison as Comparison
    from attnseq.analysis.seed_comparison import SeedComparison as SeedComparison
    from attnseq.api.compare import compare as compare
    from attnseq.api.model import Model as Model
    from attnseq.api.model import load as load
    from attnseq.api.plotting import plot_alignment as plot_alignment
    from attnseq.api.results import TranslatedHypothesis as TranslatedHypothesis
    from attnseq.api.results import Translation as Translation
    from attnseq.api.train import TrainResult as TrainResult
    from attnseq.api.train import train as train
    from attnseq.errors import UserError as UserError
    from attnseq.training.callbacks import Callback as Callback
    from attnseq.training.callbacks import TrainingEvent as TrainingEvent
    from attnseq.training.stopping import TrainingInterrupted as TrainingInterrupted


def __getattr__(name: str) -> _typing.Any:
    """Import the API name `name` from its module on first use, and keep it here."""
    if name not in _API:
        raise AttributeError(f"module 'attnseq' has no attribute {name!r}")
    value = getattr(_importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API, `__version__` and the module's dunder names: not the private helpers,
    nor the submodules (`attnseq.api`, ...) that importing an API name binds here."""
    dunders = [name for name in globals() if name.startswith("__") and name.endswith("__")]
    return sorted({*dunders, *__all__})
