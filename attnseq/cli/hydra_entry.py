"""How `attnseq train` reaches Hydra: the `config=` selector, then a real `hydra.main` entry.

`hydra.main` owns everything Hydra does (multirun, launchers, sweepers, run directories,
`--cfg`, `--help`), so `attnseq train ARGS` rewrites `sys.argv` and calls it, after the
pre-flight check (preflight.py) has composed and validated the arguments once.

`config=NAME` selects the packaged experiment/NAME.yaml; `config=PATH` (a path ending in .yaml
or .yml, or containing a `/`) loads the user's own experiment file, always: it is linked into a
private search-path folder under a name no packaged experiment can have (`user_file__...`), so
it can use the packaged config groups in its defaults list like any packaged experiment, and
its absolute path is recorded in the composed config as `config_file`.

Under torchrun (`torchrun --nproc_per_node=N -m attnseq train ...`) every process runs this;
the ones other than rank 0 get Hydra overrides that keep Hydra from writing anything (no run
directory, no .hydra/, no train.log; their log goes to stdout), since only rank 0 writes.
Multirun is refused there (by the pre-flight check): one torchrun job trains one model.
"""

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from attnseq.cli.torchrun import quiet_rank_overrides, torchrun_world
from attnseq.config import CONFIG_DIR
from attnseq.errors import UserError

# Prefix of the experiment names that user files are linked under; no packaged experiment
# name starts with it, so a user's file can never be shadowed by (or shadow) a packaged one.
USER_EXPERIMENT_PREFIX = "user_file__"


def user_experiment_dir(path: Path) -> tuple[str, Path]:
    """Link a user's experiment file into ~/.cache/attnseq/experiments/<hash>/experiment/.

    Returns the experiment name (unique to the file's absolute path) and the folder to add to
    Hydra's search path.
    """
    path = path.expanduser().absolute()
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    _check_package_header(path)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    root = Path.home() / ".cache" / "attnseq" / "experiments" / digest
    group = root / "experiment"
    try:
        group.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot link config file {path} under {group}: {error}") from None
    name = f"{USER_EXPERIMENT_PREFIX}{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest}"
    link = group / f"{name}.yaml"
    # A fresh link renamed into place: processes doing this at once (torchrun) do not race.
    fresh = group / f".{name}.{os.getpid()}.yaml"
    fresh.unlink(missing_ok=True)
    fresh.symlink_to(path.resolve())
    os.replace(fresh, link)
    return name, root


def _check_package_header(path: Path) -> None:
    """An experiment file sets keys of the whole config: without a `# @package _global_`
    header Hydra would put them under an `experiment` key that does not exist."""
    try:
        head = path.read_bytes()[:4096]
    except OSError as error:
        raise UserError(f"cannot read config file {path}: {error.strerror}") from None
    for line in head.splitlines():
        text = line.strip()
        if text.startswith(b"#") and b"@package" in text:
            return
        if text and not text.startswith(b"#"):
            break
    raise UserError(
        f"config file {path} has no '# @package _global_' line before its first key: an "
        "experiment file sets keys of the whole config, so it starts with that line "
        "(see the packaged configs/experiment/*.yaml)"
    )


def quoted_value(value: str) -> str:
    """`value` as a quoted Hydra override value: any path survives the override grammar."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


def _is_path(value: str) -> bool:
    return value.endswith((".yaml", ".yml")) or "/" in value or os.sep in value


def rewrite_config_selector(args: list[str]) -> list[str]:
    """`config=NAME` -> `experiment=NAME`; `config=PATH` -> search path + experiment + the
    path recorded as `config_file`."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("config_file="):
            raise UserError(
                "config_file is set by config=PATH (the experiment file it loaded); "
                "use config=PATH to load a file"
            )
        if not arg.startswith("config="):
            out.append(arg)
            continue
        value = arg.split("=", 1)[1]
        if _is_path(value):
            name, root = user_experiment_dir(Path(value))
            out += [
                f"experiment={name}",
                f"hydra.searchpath=[{quoted_value('file://' + str(root))}]",
                f"config_file={quoted_value(str(Path(value).expanduser().absolute()))}",
            ]
        else:
            out.append(f"experiment={value}")
    return out


def run_hydra(args: list[str]) -> None:
    """Hand `args` to the real `hydra.main` entry (multirun, launchers, sweepers included)."""
    import hydra

    from attnseq.config.schema import register_configs

    register_configs()
    world = torchrun_world()
    if world is not None and not world.is_main:
        args = quiet_rank_overrides(args)
    sys.argv = ["attnseq", *args]
    main = hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")(
        _train_task
    )
    main()


def _train_task(composed: Any) -> float | None:
    """The task function: imports the training code (torch) only when Hydra runs a job, so
    `--help`, `--cfg` and shell completion answer without it."""
    from attnseq.cli.train_task import train_from_hydra

    return train_from_hydra(composed)
