"""What a bug report needs: versions (`attnseq --version`, without torch), devices, threads, data,
Hydra plugins and the cache (`attnseq doctor`)."""

import os
import platform
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

# distribution names whose versions identify an installation
_VERSIONED = ("attnseq", "torch", "hydra-core")

Section = tuple[str, list[tuple[str, str]]]


def _installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def version_lines() -> list[str]:
    """One `name version` line each for attnseq, torch, hydra-core and Python."""
    lines = [f"{name} {_installed(name)}" for name in _VERSIONED]
    return [*lines, f"python {platform.python_version()}"]


def print_version(value: bool) -> None:
    """The versions of attnseq, torch, hydra-core and Python, then exit (when `value`)."""
    if value:
        typer.echo("\n".join(version_lines()))
        raise typer.Exit()


def _versions() -> Section:
    rows = [(name, _installed(name)) for name in _VERSIONED]
    rows.append(("python", f"{platform.python_version()} ({sys.executable})"))
    rows.append(("platform", platform.platform()))
    return "versions", rows


def _devices() -> Section:
    import torch

    from attnseq.config.devices import DEVICE_FORMS, gpu_summaries

    rows = [("cuda available", str(torch.cuda.is_available()))]
    if torch.cuda.is_available():
        rows.append(("cuda version", str(torch.version.cuda)))
        rows += gpu_summaries()
    mps = getattr(torch.backends, "mps", None)
    rows.append(("mps available", str(bool(mps and mps.is_available()))))
    rows.append(("device names", DEVICE_FORMS))
    from attnseq.config.threads import default_threads, load_aware_threads, usable_cores

    rows.append(("torch threads", f"{torch.get_num_threads()} (of {os.cpu_count()} CPUs)"))
    cores = usable_cores()
    rows.append(("default threads", f"{default_threads()} (torch's default, {cores} usable cores)"))
    load = f"load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "no load"
    rows.append(("threads auto", f"{load_aware_threads()} ({cores} usable cores, {load})"))
    return "devices", rows


def _local_data_configs() -> Iterator[tuple[str, object]]:
    """(name, DataConfig) of every packaged data config that reads local files."""
    from omegaconf import OmegaConf

    from attnseq.config import CONFIG_DIR
    from attnseq.config.choices import DataSource
    from attnseq.config.schema import DataConfig

    for path in sorted((CONFIG_DIR / "data").glob("*.yaml")):
        merged = OmegaConf.merge(OmegaConf.structured(DataConfig), OmegaConf.load(path))
        cfg = OmegaConf.to_object(merged)
        assert isinstance(cfg, DataConfig)
        if cfg.source is DataSource.local:
            yield path.stem, cfg


def _data() -> Section:
    from attnseq.data.sources import split_files
    from attnseq.errors import UserError

    configured = os.environ.get("ATTNSEQ_DATA")
    root = Path(configured or "data").expanduser()
    state = "" if root.is_dir() else " (no such folder)"
    where = f"{configured}{state}" if configured else f"not set: ./data is used{state}"
    rows = [("ATTNSEQ_DATA", where)]
    for name, cfg in _local_data_configs():
        try:
            files = split_files(cfg)  # type: ignore[arg-type]
        except UserError as error:
            first = str(error).split(";")[0]
            missing = first.removeprefix("data file not found: ")
            # a file that exists but cannot be read (a folder, a pipe) is named as it is
            rows.append((f"data={name}", f"missing {missing}" if missing != first else first))
            continue
        splits = ", ".join(files)
        rows.append((f"data={name}", f"found ({splits})"))
    return "data", rows


def _hydra_plugins() -> Section:
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # imports every hydra_plugins.* module: each registers its configs
    repo = ConfigStore.instance().repo.get("hydra", {})
    rows = []
    for group in ("launcher", "sweeper"):
        names = repo.get(group, {})  # configs end in .yaml; the rest are subgroups
        options = sorted(name.removesuffix(".yaml") for name in names if name.endswith(".yaml"))
        rows.append((f"hydra/{group}", ", ".join(options) or "none"))
    packages = sorted(
        f"{dist.metadata['Name']} {dist.version}"
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").lower().replace("_", "-").startswith("hydra-")
        and (dist.metadata["Name"] or "").lower().replace("_", "-") != "hydra-core"
    )
    rows.append(("plugin packages", ", ".join(packages) or "none"))
    return "hydra plugins", rows


def folder_size(path: Path) -> int:
    """Bytes of the regular files under `path` (symbolic links not followed)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += (Path(folder) / name).lstat().st_size
            except OSError:
                continue  # removed while walking: a cache may be pruned at any time
    return total


def human_size(size: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _cache_problem() -> str | None:
    """Why the cache folder or its prepared/ cannot be used, None when they can."""
    from attnseq.data.locations import cache_folder_problem, cache_root

    root = cache_root()
    for path in (root, root / "prepared"):
        problem = cache_folder_problem(path)
        if problem is not None:
            return f"unusable: {path} {problem}"
    return None


def _cache() -> Section:
    from attnseq.data.locations import cache_root

    root = cache_root()
    size = _cache_problem() or (human_size(folder_size(root)) if root.is_dir() else "absent")
    return "cache", [("folder", str(root)), ("size", size)]


def _cache_entries() -> tuple[Section, int]:
    """Every prepared-data entry of the cache checked in full (checksums included), and how
    many are damaged."""
    from attnseq.data.cache import describe_entries
    from attnseq.data.locations import cache_root

    described = describe_entries(cache_root() / "prepared", verify=True)
    rows = [(name, verdict) for name, verdict, _ in described] or [("entries", "none")]
    return ("cache entries", rows), sum(damaged for _, _, damaged in described)


def report() -> list[Section]:
    """Every section of `attnseq doctor`, in order."""
    return [_versions(), _devices(), _data(), _hydra_plugins(), _cache()]


def format_report(sections: list[Section]) -> str:
    """Sections as indented `key: value` lines under their titles."""
    lines = []
    for title, rows in sections:
        lines.append(f"{title}:")
        width = max(len(key) for key, _ in rows)
        lines += [f"  {key + ':':<{width + 1}} {value}" for key, value in rows]
    return "\n".join(lines)


def doctor(
    verify_cache: Annotated[
        bool,
        typer.Option(
            "--verify-cache",
            help="Also check every prepared-data entry of the cache in full (sizes, rows, "
            "token ids and checksums: reads every byte); exit status 1 when one is damaged.",
        ),
    ] = False,
) -> None:
    """Print what a bug report needs: versions, devices, data, Hydra plugins and cache.

    \b
    versions   attnseq, torch, hydra-core, Python, the platform
    devices    each GPU (memory, compute capability), MPS, device names, threads
    data       ATTNSEQ_DATA and the packaged local corpora found or missing there
    plugins    the Hydra launchers and sweepers installed
    cache      the cache folder ($ATTNSEQ_CACHE) and its size
    entries    with --verify-cache: each prepared-data entry checked in full

    \b
    attnseq doctor
    attnseq doctor --verify-cache
    ATTNSEQ_DATA=/data/corpora attnseq doctor
    """
    sections = report()
    damaged = 0
    unusable = _cache_problem()
    if verify_cache and unusable is None:
        entries, damaged = _cache_entries()
        sections.append(entries)
    typer.echo(format_report(sections))
    if verify_cache and unusable is not None:
        typer.echo(
            f"error: the cache is {unusable}: point the ATTNSEQ_CACHE environment variable at "
            "a folder attnseq may write",
            err=True,
        )
        raise typer.Exit(1)
    if damaged:
        typer.echo(
            f"error: {damaged} damaged cache entr{'y' if damaged == 1 else 'ies'}: delete "
            f"{'it' if damaged == 1 else 'them'}, or train with data.verify=true, which moves a "
            "damaged entry aside and prepares the data again",
            err=True,
        )
        raise typer.Exit(1)
