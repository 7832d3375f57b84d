"""The jobs of a Hydra multirun sweep as they lie on disk, for `attnseq sweep-report`.

A sweep folder (`multirun/DATE/TIME/`, or whatever `hydra.sweep.dir` named) holds one folder per
job, each with `.hydra/overrides.yaml` (the job's command-line overrides, which is what differs
between jobs) and, once training has finished, `metrics.json` (written last by training). A job
without metrics.json has failed or is still running. Files are read with PyYAML: this is a
reporting tool and needs no Hydra. Override values stay the strings the command line gave;
`as_number` and `short_value` read them as numbers where they are.
"""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FINISHED = "ok"
UNFINISHED = "failed/unfinished"


@dataclass
class Job:
    """One job of a sweep.

    name: the job folder relative to the sweep folder ("0", "1", ... by default).
    params: the job's overrides, key -> value as written on the command line.
    metrics: the contents of metrics.json; None when the job has none (failed or still running).
    wall_seconds: from the job's start to its metrics.json (`job_wall_seconds`); None while
        it has none.
    """

    name: str
    folder: Path
    params: dict[str, str]
    metrics: dict[str, Any] | None
    wall_seconds: float | None = None

    @property
    def status(self) -> str:
        return FINISHED if self.metrics is not None else UNFINISHED

    def value(self, metric: str) -> float | None:
        """The job's value of `metric`, None when missing or not a number."""
        if self.metrics is None:
            return None
        value = self.metrics.get(metric)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)


def read_yaml(path: Path) -> Any:
    """YAML contents, or None when the file is missing or unreadable (a job being written)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def _read_metrics(path: Path) -> dict[str, Any] | None:
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return metrics if isinstance(metrics, dict) else None


def parse_override(override: str) -> tuple[str, str]:
    """`key=value` (also `+key=value`, `++key=value`, `~key`) -> (key, value)."""
    key, _, value = override.partition("=")
    if key.startswith("~"):
        return key[1:], "<deleted>"
    return key.lstrip("+"), value


def job_order(job: Job) -> tuple:
    """Natural order of job names: job 10 after job 9 (Hydra numbers jobs 0, 1, ...)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", job.name))


def find_jobs(root: Path) -> list[Job]:
    """Every job folder under `root`: a folder (below the root) holding .hydra/overrides.yaml.

    Hydra puts jobs at `${hydra.sweep.subdir}`, by default the job number, but a user may
    choose a nested subdir (e.g. `${hydra.job.override_dirname}`), so the search is recursive.
    """
    jobs = []
    for overrides_file in root.rglob(".hydra/overrides.yaml"):
        folder = overrides_file.parent.parent
        if folder == root:
            continue
        overrides = read_yaml(overrides_file)
        if not isinstance(overrides, list):
            overrides = []
        params = dict(parse_override(str(item)) for item in overrides)
        name = folder.relative_to(root).as_posix()
        metrics = _read_metrics(folder / "metrics.json")
        wall = job_wall_seconds(folder) if metrics is not None else None
        jobs.append(Job(name, folder, params, metrics, wall))
    return sorted(jobs, key=job_order)


def sweep_files(root: Path) -> list[Path]:
    """The files a report of the sweep under `root` reads: its multirun.yaml and
    optimization_results.yaml, and each job's .hydra/ files and metrics.json (those that
    exist)."""
    files = [root / "multirun.yaml", root / "optimization_results.yaml"]
    for job in find_jobs(root):
        hydra = job.folder / ".hydra"
        files += sorted(hydra.iterdir()) if hydra.is_dir() else []
        files.append(job.folder / "metrics.json")
    return [path for path in files if path.is_file()]


def job_wall_seconds(folder: Path) -> float | None:
    """Seconds from the job's start to the end of its training: Hydra writes .hydra/ when a
    job starts and training writes metrics.json last, so the modification times of the two
    bound the job (a job resumed in its own folder: its last session)."""
    try:
        started = min(path.stat().st_mtime for path in (folder / ".hydra").iterdir())
        ended = (folder / "metrics.json").stat().st_mtime
    except (OSError, ValueError):  # ValueError: an empty .hydra/
        return None
    return max(ended - started, 0.0)


def varied_keys(jobs: Sequence[Job]) -> list[str]:
    """Override keys whose values differ across jobs (missing counts as a value), in the
    order they first appear."""
    order: dict[str, None] = {}
    for job in jobs:
        order.update(dict.fromkeys(job.params))
    return [key for key in order if len({job.params.get(key) for job in jobs}) > 1]


def metric_keys(jobs: Sequence[Job]) -> list[str]:
    """Numeric metric names over all finished jobs, sorted."""
    keys: set[str] = set()
    for job in jobs:
        keys.update(key for key in job.metrics or {} if job.value(key) is not None)
    return sorted(keys)


def as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def short_value(text: str) -> str:
    """A parameter value for display: floats to 4 significant digits (Optuna samples
    0.0006824078427098838), everything else as written."""
    number = as_number(text)
    if number is None or text.lstrip("+-").isdigit():
        return text
    return f"{number:.4g}"
