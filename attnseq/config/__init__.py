"""Configuration: the typed schema (schema.py) and its choices (choices.py), the checks that run
before any work (checks.py), conversion to and from plain dicts (conversion.py), and the packaged
YAML config groups beside them.

The YAML files travel inside the package (package data), so an installed wheel composes the
same configs as a source checkout: `CONFIG_DIR` is Hydra's primary config directory.
"""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent
