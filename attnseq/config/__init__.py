"""Configuration: the typed schema, its checks, its composition from the command's words, and
`CONFIG_DIR`, where the packaged YAML groups are (docs/internals/configuration.md)."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_INSTALLED = _PACKAGE / "configs"
CONFIG_DIR = _INSTALLED if _INSTALLED.is_dir() else _PACKAGE.parent / "configs"
