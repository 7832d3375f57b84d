"""Training curves of a sweep folder's configurations, seeds pooled: one panel per TensorBoard
scalar (e.g. valid/loss, train/grad_norm, attention/entropy), one line per configuration (the
mean over its seeds) with the band between the seeds' lowest and highest value.

    .venv/bin/python studies/attention_claims_curves.py runs/claims/transformer_scaling \\
        --tags valid/loss train/grad_norm attention/entropy \\
        --out docs/results/attention_claims/transformer_scaling_curves.png

A configuration is a run's Hydra overrides (.hydra/overrides.yaml) without its seed; its label
keeps the overrides that differ between the folder's configurations. Prints the JSON of the
curves (step -> mean, min, max per configuration and scalar) on stdout.
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)


def run_overrides(run: Path) -> list[str]:
    """The run's command-line overrides without its seed."""
    overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
    return [item for item in overrides if not item.startswith("seed=")]


def configurations(folder: Path) -> dict[str, list[Path]]:
    """Label -> the runs (seeds) of each configuration of the sweep folder."""
    runs = sorted(p for p in folder.iterdir() if (p / ".hydra" / "overrides.yaml").is_file())
    if not runs:
        raise SystemExit(f"{folder} holds no runs (no */.hydra/overrides.yaml)")
    keys = {run: tuple(run_overrides(run)) for run in runs}
    shared = set.intersection(*(set(key) for key in keys.values()))
    groups: dict[str, list[Path]] = defaultdict(list)
    for run, key in keys.items():
        label = " ".join(item for item in key if item not in shared) or "all runs"
        groups[label].append(run)
    return dict(groups)


def scalar(run: Path, tag: str) -> dict[int, float]:
    """Step -> value of one TensorBoard scalar of a run."""
    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return {}
    return {event.step: event.value for event in events.Scalars(tag)}


def pooled(runs: list[Path], tag: str) -> dict[str, list[float]]:
    """Steps every seed logged, and the mean, min and max over seeds at each."""
    curves = [scalar(run, tag) for run in runs]
    steps = sorted(set.intersection(*(set(curve) for curve in curves))) if curves else []
    values = np.array([[curve[step] for step in steps] for curve in curves])
    if not steps:
        return {"step": [], "mean": [], "min": [], "max": []}
    return {
        "step": steps,
        "mean": values.mean(axis=0).tolist(),
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--tags", nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True, help="the PNG")
    parser.add_argument("--log", nargs="*", default=[], help="tags drawn on a log scale")
    args = parser.parse_args()
    groups = configurations(args.folder)
    curves = {label: {tag: pooled(runs, tag) for tag in args.tags} for label, runs in groups.items()}
    figure, axes = plt.subplots(1, len(args.tags), figsize=(4.6 * len(args.tags), 3.6))
    for axis, tag in zip(np.atleast_1d(axes), args.tags, strict=True):
        for label, by_tag in curves.items():
            curve = by_tag[tag]
            seeds = len(groups[label])
            (line,) = axis.plot(curve["step"], curve["mean"], label=f"{label} ({seeds} seeds)")
            axis.fill_between(curve["step"], curve["min"], curve["max"], alpha=0.2,
                              color=line.get_color())  # fmt: skip
        axis.set_title(tag)
        axis.set_xlabel("update")
        if tag in args.log:
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=7)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=120)
    print(json.dumps(curves, indent=1))


if __name__ == "__main__":
    main()
