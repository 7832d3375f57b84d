"""Configuration: the typed schema (schema.py) and its choices (choices.py), the checks that run
before any work (checks.py), and conversion to and from plain dicts (conversion.py).

The packaged YAML config groups (train.yaml, data/, model/, optim/, trainer/, experiment/,
hparams_search/) live in the top-level configs/ folder of the checkout; the wheel ships that
folder as the package data of `attnseq.configs` (pyproject.toml maps it there), so an installed
wheel composes the same files as a checkout. `CONFIG_DIR` is Hydra's primary config directory:
the folder of the `attnseq.configs` package where a wheel is installed, configs/ beside attnseq/
in a checkout (an editable install included).
"""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_INSTALLED = _PACKAGE / "configs"
CONFIG_DIR = _INSTALLED if _INSTALLED.is_dir() else _PACKAGE.parent / "configs"
