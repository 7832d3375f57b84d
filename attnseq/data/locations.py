"""Where attnseq finds data files and keeps its caches, and which data locations a checkpoint's
config may name (`check_checkpoint_data`): none outside this machine's data root, no download."""

import os
import stat
from collections.abc import Collection
from pathlib import Path, PurePath

from attnseq.config.choices import DataSource, FileFormat
from attnseq.config.schema import DataConfig
from attnseq.errors import UserError
from attnseq.io.user_paths import special_file_kind

# Where a user who installed the wheel (no checkout, so no data/README.md) finds out which data
# files a config expects and where to get them: what every "data file not found" ends with.
WHERE_TO_GET_DATA = (
    "`attnseq doctor` lists the files each packaged data config expects under the data root, "
    "and the Data page of the attnseq documentation says where to get each dataset"
)


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


def cache_folder_problem(path: Path) -> str | None:
    """Why `path`, a folder of the cache, cannot be one ("is a regular file, not a folder",
    "cannot be looked at (Too many levels of symbolic links)", ...); None when it is a
    folder or can be made one (it does not exist yet)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if not path.is_symlink():
            return None
        return f"is a symbolic link to {os.readlink(path)}, which does not exist"
    except OSError as error:
        return f"cannot be looked at ({error.strerror})"
    if stat.S_ISDIR(mode):
        return None
    return f"is {special_file_kind(mode) or 'a regular file'}, not a folder"


def checked_cache_folder(name: str) -> Path:
    """`cache_root() / name`, after a UserError when it or the cache folder cannot be a
    folder (`cache_folder_problem`): what every writer into the cache starts with."""
    root = cache_root()
    for path in (root, root / name):
        problem = cache_folder_problem(path)
        if problem is not None:
            raise UserError(
                f"the cache folder {path} {problem}; point the ATTNSEQ_CACHE environment "
                "variable at a folder attnseq may write (or move what is there away)"
            )
    return root / name


def resolve_data_path(path: str | Path, cfg: DataConfig) -> Path:
    """An absolute (or ~) path as it is; a relative one under `data_root(cfg)`."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else data_root(cfg) / candidate


def with_suffix(prefix: Path, lang: str) -> Path:
    # Not Path.with_suffix: "multi30k/test_2016_flickr" + "de", and prefixes may contain dots.
    return prefix.with_name(f"{prefix.name}.{lang}")


def overridden_keys(overrides: Collection[str] | None) -> set[str]:
    """The dotted keys that `key=value` overrides set (`+key=value` and `~key` included)."""
    return {item.lstrip("+~").split("=", 1)[0].strip() for item in overrides or ()}


def check_checkpoint_data(
    cfg: DataConfig,
    given: Collection[str],
    reads_dataset: bool = True,
    local_file: str = "",
    overridable: bool = True,
) -> None:
    """Raise UserError for a data location in `cfg` (a checkpoint's data config after the
    overrides) that does not come from the user (`given`: the keys set on the command line;
    a key covers the keys under it) and leaves the user's data root.

    `reads_dataset`: the dataset's own splits are read (eval of a split name); False when eval
    reads a file the user named (only `data.root` matters then). `local_file`: how the
    message for data from the Hub tells the user to give a local file instead (a command
    that takes one passes its option); empty: the caller takes no file. `overridable`: the
    caller takes overrides, and the messages say which one allows the location.
    """

    def from_user(key: str) -> bool:
        parts = key.split(".")
        return any(".".join(parts[:n]) in given for n in range(1, len(parts) + 1))

    def allow(override: str) -> str:
        return f": pass {override} on the command line to allow it" if overridable else ""

    if cfg.root and not from_user("data.root"):
        own = Path(os.environ.get("ATTNSEQ_DATA") or "data").expanduser().resolve()
        if Path(cfg.root).expanduser().resolve() != own:
            raise UserError(
                f"the checkpoint sets data.root={cfg.root!r}, not this machine's data root "
                f"{own} ($ATTNSEQ_DATA, else ./data); a checkpoint does not choose where "
                f"attnseq reads files{allow(f'data.root={cfg.root}')}"
            )
    if not reads_dataset:
        return
    if cfg.source is DataSource.hub and not from_user("data.source"):
        instead = f", or evaluate a local file with {local_file}" if local_file else ""
        raise UserError(
            f"the checkpoint's data comes from the Hugging Face Hub (data.hub_name="
            f"{cfg.hub_name!r}); a checkpoint does not choose what attnseq downloads"
            f"{allow('data.source=hub')}{instead}"
        )
    if cfg.source is not DataSource.local:
        return
    for split, value in cfg.splits.items():
        key = f"data.splits.{split}"
        if not from_user(key) and not _stays_inside(value):
            raise UserError(
                f"the checkpoint's {key}={value!r} is not a path inside the data root; a "
                "checkpoint's data paths must be relative to it (no absolute path, ~ or "
                f"'..' leading out){allow(f'{key}={value}')}"
            )
    if cfg.format is FileFormat.parallel:
        for lang in ("src_lang", "tgt_lang"):
            value = getattr(cfg, lang)
            if not from_user(f"data.{lang}") and not _plain_suffix(value):
                raise UserError(
                    f"the checkpoint's data.{lang}={value!r} is not a plain file suffix"
                    f"{allow(f'data.{lang}=...')}"
                )


def _stays_inside(value: str) -> bool:
    """A relative path that normalises to somewhere under its base folder."""
    if not value or value.startswith("~") or PurePath(value).is_absolute():
        return False
    normal = os.path.normpath(value)
    return normal != ".." and not normal.startswith(".." + os.sep) and not os.path.isabs(normal)


def _plain_suffix(value: str) -> bool:
    return bool(value) and value not in (".", "..") and "/" not in value and os.sep not in value
