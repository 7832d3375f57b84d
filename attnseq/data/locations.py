"""Where attnseq finds data files and keeps its caches on disk.

The data root is `data.root`, else `$ATTNSEQ_DATA`, else `./data`; relative data paths resolve
against it. The cache folder is `$ATTNSEQ_CACHE`, else ~/.cache/attnseq.
"""

import os
from pathlib import Path

from attnseq.config.schema import DataConfig


def data_root(cfg: DataConfig) -> Path:
    """The folder relative data paths resolve against: data.root, $ATTNSEQ_DATA, or ./data."""
    root = cfg.root or os.environ.get("ATTNSEQ_DATA") or "data"
    return Path(root).expanduser()


def cache_root() -> Path:
    """attnseq's cache folder: $ATTNSEQ_CACHE, else ~/.cache/attnseq.

    Holds sentencepiece models (spm/), tokenized splits (prepared/) and the `datasets`
    library's Arrow copies of local files (datasets/). Any of it may be deleted at any time.
    """
    configured = os.environ.get("ATTNSEQ_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "attnseq"


def resolve_data_path(path: str | Path, cfg: DataConfig) -> Path:
    """An absolute (or ~) path as it is; a relative one under `data_root(cfg)`."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else data_root(cfg) / candidate


def with_suffix(prefix: Path, lang: str) -> Path:
    # Not Path.with_suffix: "multi30k/test_2016_flickr" + "de", and prefixes may contain dots.
    return prefix.with_name(f"{prefix.name}.{lang}")
