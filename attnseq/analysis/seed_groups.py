"""The seed groups of a comparison: which runs of sweep folders repeat one configuration and
what each group is called; and the reading of a sweep folder that sweep-report shares."""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from attnseq.errors import UserError

if TYPE_CHECKING:
    from attnseq.analysis.comparison import Decode, System

# Configuration keys that do not change what a run trains: the seed (what the repeats vary),
# where the data and the run's files are, how it logs, saves and uses the machine.
IGNORED_KEYS = (
    "seed",
    "resume",
    "config_file",
    "hydra",
    "logger",
    "tracker",
    "data.root",
    "data.prepare_workers",
    "trainer.device",
    "trainer.threads",
    "trainer.num_workers",
    "trainer.pin_memory",
    "trainer.progress",
    "trainer.overwrite",
    "trainer.log_every",
    "trainer.num_heatmaps",
    "trainer.heatmap_scale",
    "trainer.save_every_steps",
    "trainer.save_every_minutes",
    "trainer.keep_last",
)


# ----------------------------------------------------- reading a sweep folder (sweep-report too)
def read_yaml(path: Path) -> Any:
    """YAML contents, or None when the file is missing or unreadable (a job being written)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def parse_override(override: str) -> tuple[str, str]:
    """`key=value` (also `+key=value`, `++key=value`, `~key`) -> (key, value)."""
    key, _, value = override.partition("=")
    if key.startswith("~"):
        return key[1:], "<deleted>"
    return key.lstrip("+"), value


def natural_order(name: str) -> tuple:
    """Sort key of natural order: job 10 after job 9 (Hydra numbers jobs 0, 1, ...). The split
    alternates text and digits, so equal positions always compare like with like."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def differing_keys(rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Keys whose values differ across `rows` (a missing key counts as a value), in the order
    they first appear."""
    order = dict.fromkeys(key for row in rows for key in row)
    return [key for key in order if len({row.get(key) for row in rows}) > 1]


# ----------------------------------------------------------------------------- the groups
MAX_SWEEP_DEPTH = 4  # levels below a sweep folder searched for runs (Hydra's jobs are at 1)
MAX_SWEEP_FOLDERS = 10_000  # folders a search visits before it calls the folder no sweep


@dataclass
class Member:
    """A system of a group: a run directory (or any path `load_system` reads), its seed (None
    when it has none: a hypothesis file, an eval result folder), and what it trained (its
    config without the ignored keys but with the seed, as JSON text) when it is a run or a
    checkpoint: two members that trained the same are one run, wherever they are."""

    path: Path
    seed: int | None
    trained: str | None = None


@dataclass
class SeedRun:
    """A member with its outputs."""

    seed: int | None
    system: "System"


@dataclass
class Group:
    """One configuration: its name, its members, and once loaded (`load_groups`) their runs."""

    name: str
    members: list[Member]
    runs: list[SeedRun] = field(default_factory=list)


def is_run_directory(path: Path) -> bool:
    return (path / "checkpoints" / "best.pt").is_file()


def is_run_folder(path: Path) -> bool:
    """A run's folder, done or not: it has checkpoints/ (training made it) or .hydra/ (a job
    of a Hydra sweep, which sweep-report lists)."""
    return (path / "checkpoints").is_dir() or (path / ".hydra").is_dir()


def is_finished(path: Path) -> bool:
    """Training writes a run's metrics.json last: with it, the run is done."""
    return (path / "metrics.json").is_file()


@dataclass
class SweepRuns:
    """The run folders below a sweep folder: the finished ones, each with its
    checkpoints/best.pt, and those still running or stopped (no metrics.json)."""

    finished: list[Path]
    unfinished: list[Path]


def sweep_runs(folder: Path) -> SweepRuns:
    """The run folders (`is_run_folder`) below `folder` (not `folder` itself), at most
    MAX_SWEEP_DEPTH levels down, in natural order of their paths; a run's own folders and
    hidden folders are not searched, a linked folder counts when it is a run. UserError for a
    finished run without checkpoints/best.pt (what sweep-report refuses too) and for a folder
    with more than MAX_SWEEP_FOLDERS folders within those levels (no sweep: /tmp)."""
    found: list[Path] = []
    stack, visited = [(folder, 0)], 0
    while stack:
        parent, depth = stack.pop()
        try:
            children = [path for path in parent.iterdir() if path.is_dir()]
        except OSError:
            continue
        visited += len(children)
        if visited > MAX_SWEEP_FOLDERS:
            raise UserError(
                f"{folder}: more than {MAX_SWEEP_FOLDERS} folders within {MAX_SWEEP_DEPTH} "
                "levels below it, so no sweep folder (a sweep folder holds run directories, "
                "as multirun/DATE/TIME does)"
            )
        for child in children:
            if is_run_folder(child):
                found.append(child)
            elif (
                not child.name.startswith(".")
                and not child.is_symlink()
                and depth + 1 < MAX_SWEEP_DEPTH
            ):
                stack.append((child, depth + 1))
    found.sort(key=lambda path: natural_order(path.relative_to(folder).as_posix()))
    for run in found:
        check_finished_run(run)
    finished = [run for run in found if is_finished(run)]
    return SweepRuns(finished, [run for run in found if not is_finished(run)])


def check_finished_run(run: Path) -> None:
    """UserError for a finished run folder (metrics.json) without checkpoints/best.pt: compare
    and sweep-report would have nothing to decode."""
    if is_run_folder(run) and is_finished(run) and not is_run_directory(run):
        raise UserError(
            f"{run}: a finished run without checkpoints/best.pt (its metrics.json is there, "
            "its best checkpoint is not): put the checkpoint back or move the run out of the "
            "sweep folder"
        )


def is_sweep_folder(path: Path) -> bool:
    """A folder that is neither a run directory nor an eval result folder, with runs below."""
    if not path.is_dir() or _is_system_folder(path):
        return False
    runs = sweep_runs(path)
    return bool(runs.finished or runs.unfinished)


def ignored(key: str) -> bool:
    return any(key == name or key.startswith(name + ".") for name in IGNORED_KEYS)


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Every leaf of a nested config: dotted key -> its value as JSON text."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flat_config(value, dotted + "."))
        else:
            flat[dotted] = json.dumps(value, sort_keys=True)
    return flat


def run_config(run: Path) -> dict[str, Any]:
    """The resolved config stored in the run's checkpoints/best.pt."""
    from attnseq.io.checkpoint import load_checkpoint

    config = load_checkpoint(run / "checkpoints" / "best.pt").get("config")
    if not isinstance(config, dict):
        raise UserError(f"{run}: its checkpoint holds no config")
    return config


def run_overrides(run: Path) -> dict[str, str] | None:
    """The run's command-line overrides (.hydra/overrides.yaml), key -> value as written,
    without the ignored keys; None when the run has no such file."""
    items = read_yaml(run / ".hydra" / "overrides.yaml")
    if not isinstance(items, list):
        return None
    pairs = (parse_override(str(item)) for item in items)
    return {key: value for key, value in pairs if not ignored(key)}


def _shown(text: str | None) -> str:
    """A config value (JSON text) as a command line writes it: strings bare, lists as JSON."""
    if text is None:
        return "<absent>"
    value = json.loads(text)
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def group_names(
    configs: Sequence[Mapping[str, str]], overrides: Sequence[Mapping[str, str] | None]
) -> list[str]:
    """Each group's name: `key=value,...` of the overrides that differ between the groups when
    every group has overrides and they tell the groups apart, else of the differing
    configuration keys (`flat_config`, values shown as written on a command line)."""
    if all(item is not None for item in overrides):
        given = [dict(item or {}) for item in overrides]
        keys = differing_keys(given)
        names = [",".join(f"{key}={row[key]}" for key in keys if key in row) for row in given]
        if all(names) and len(set(names)) == len(names):
            return names
    keys = differing_keys(configs)
    return [",".join(f"{key}={_shown(row.get(key))}" for key in keys) for row in configs]


def group_runs(runs: Sequence[Path], folders: Sequence[Path]) -> list[Group]:
    """The runs of sweep folders grouped by configuration without the ignored keys, in the
    order of each group's first run; named by `group_names`, or by the folders when all runs
    share one configuration."""
    found: dict[tuple, list[tuple[Path, dict[str, Any]]]] = {}
    for run in runs:
        config = run_config(run)
        flat = flat_config(config)
        key = tuple(sorted((name, value) for name, value in flat.items() if not ignored(name)))
        found.setdefault(key, []).append((run, config))
    if len(found) == 1:
        names = ["+".join(str(folder) for folder in folders)]
    else:
        shared = [_shared_overrides([run for run, _ in members]) for members in found.values()]
        names = group_names([dict(key) for key in found], shared)
    return [
        Group(name, [_member(run, config) for run, config in members])
        for name, members in zip(names, found.values(), strict=True)
    ]


def _member(path: Path, config: Mapping[str, Any]) -> Member:
    """A run or checkpoint with its seed and what it trained (`Member.trained`)."""
    flat = flat_config(config)
    trained = json.dumps(sorted((key, value) for key, value in flat.items() if not ignored(key)))
    seed = _seed(config.get("seed"))
    return Member(path, seed, f"{trained} seed={json.dumps(config.get('seed'))}")


def _shared_overrides(runs: Sequence[Path]) -> dict[str, str] | None:
    """The overrides every run of a group has alike; None when a run has none or they
    differ."""
    found = [run_overrides(run) for run in runs]
    first = found[0]
    return first if first is not None and all(item == first for item in found) else None


def _seed(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def single_member(path: Path) -> Member:
    """A path given on its own: its seed and what it trained from its checkpoint's config
    when it is a run directory or a checkpoint file, else none. UserError for a finished run
    without checkpoints/best.pt."""
    check_finished_run(path)
    if is_run_directory(path):
        return _member(path, run_config(path))
    if path.suffix == ".pt" and path.is_file():
        from attnseq.io.checkpoint import load_checkpoint

        config = load_checkpoint(path).get("config")
        return _member(path, config) if isinstance(config, dict) else Member(path, None)
    return Member(path, None)


def plan_groups(paths: Sequence[Path], notes: list[str] | None = None) -> list[Group]:
    """The groups of `paths`, in the order given: the finished runs of the sweep folders,
    pooled and grouped by configuration (`group_runs`), where the first folder stands; each
    other path a group of one run, named by the path as given. The unfinished runs are left
    out, one line in `notes` naming them. Nothing is decoded yet; UserError for a run given
    twice (`check_distinct`) or two groups of one name."""
    entries: list[Group | None] = []
    folders: list[Path] = []
    runs: list[Path] = []
    unfinished: list[Path] = []
    for path in map(Path, paths):
        if is_sweep_folder(path):
            entries += [] if folders else [None]
            folders.append(path)
            found = sweep_runs(path)
            runs += found.finished
            unfinished += found.unfinished
        else:
            entries.append(Group(str(path), [single_member(path)]))
    if unfinished and notes is not None:
        notes.append(f"left out, unfinished (no metrics.json): {', '.join(map(str, unfinished))}")
    swept = group_runs(runs, folders) if runs else []
    groups = [group for entry in entries for group in (swept if entry is None else [entry])]
    check_distinct(groups)
    names = [group.name for group in groups]
    if len(set(names)) != len(names):
        raise UserError(f"two groups have one name: {', '.join(names)}")
    return groups


def check_distinct(groups: Sequence[Group]) -> None:
    """UserError when two members are one run: one file by two paths (device and inode), or
    two runs that trained the same configuration with the same seed (a copy), which would
    count one seed twice."""
    from attnseq.analysis.comparison import system_identity

    seen: dict[object, Path] = {}
    trained: dict[str, Member] = {}
    for member in (member for group in groups for member in group.members):
        where = system_identity(member.path)
        if where in seen:
            raise UserError(f"{member.path} is given twice (as {seen[where]} too)")
        seen[where] = member.path
        if member.trained is not None and member.trained in trained:
            first = trained[member.trained]
            raise UserError(
                f"{member.path} and {first.path} are one run (one configuration, seed "
                f"{seed_text(member.seed)}): a seed counts once; move one of them out"
            )
        if member.trained is not None:
            trained[member.trained] = member


def choose_baseline(groups: list[Group], baseline: str | None, option: str = "baseline") -> str:
    """The baseline group's name: `baseline` names a group, or is the path of one of its runs,
    or of a system not among the groups (it becomes a group of its own, first); default the
    first group. UserError listing the groups when it matches none; `option`: what the
    message calls the argument."""
    if baseline is None:
        return groups[0].name
    names = [group.name for group in groups]
    if baseline in names:
        return baseline
    path = Path(baseline)
    if path.exists():
        where = path.resolve()
        for group in groups:
            if any(member.path.resolve() == where for member in group.members):
                return group.name
        if not is_sweep_folder(path):
            groups.insert(0, Group(baseline, [single_member(path)]))
            return baseline
    raise UserError(f"{option} {baseline!r} matches no group. The groups: {'; '.join(names)}")


def load_groups(groups: Sequence[Group], decode: "Decode") -> None:
    """Each member's outputs (`comparison.load_system`: eval results reused, else decoded as
    `decode` says)."""
    from attnseq.analysis import comparison

    for group in groups:
        group.runs = [
            SeedRun(member.seed, comparison.load_system(member.path, decode))
            for member in group.members
        ]


def ready_groups(
    groups: list[Group], baseline: str | Path | None, option: str, decode: "Decode"
) -> str:
    """The baseline group's name (`choose_baseline`; `option`: what its message calls
    `baseline`) once the groups are counted (`check_group_count`) and their runs loaded as
    `decode` says (`load_groups`): every mistake that can be known is refused before any
    decoding."""
    chosen = choose_baseline(groups, None if baseline is None else str(baseline), option)
    check_group_count(groups)
    check_distinct(groups)
    load_groups(groups, decode)
    return chosen


def check_group_count(groups: Sequence[Group]) -> None:
    """UserError below two groups, saying what the one group holds."""
    if len(groups) >= 2:
        return
    if not groups:
        raise UserError("comparing needs at least two groups, got none")
    seeds = ", ".join(seed_text(member.seed) for member in groups[0].members)
    raise UserError(
        f"comparing needs at least two groups, got one: {groups[0].name} (seeds {seeds}); "
        "all its runs share one configuration"
    )


def sweep_requested(paths: Sequence[Path]) -> bool:
    """Whether `paths` ask for a comparison of seed groups: one of them is a sweep folder.
    UserError when the one path given is a folder that is neither a system nor holds runs."""
    paths = [Path(path) for path in paths]
    if any(is_sweep_folder(path) for path in paths):
        return True
    lone = paths[0] if len(paths) == 1 else None
    if lone is not None and lone.is_dir() and not _is_system_folder(lone):
        raise UserError(
            f"{lone}: no run directories below it (a sweep folder holds runs with "
            "checkpoints/best.pt), and not a system itself"
        )
    return False


def _is_system_folder(path: Path) -> bool:
    """A run directory or an eval result folder (what comparison.load_system reads)."""
    return (path / "checkpoints").is_dir() or (path / "hyps.txt").is_file()


def seed_text(seed: int | None) -> str:
    """A seed as the tables show it: "-" for none."""
    return "-" if seed is None else str(seed)
