"""Training curves of a sweep folder's configurations, seeds pooled: one panel per TensorBoard
scalar (e.g. valid/loss, train/grad_norm, attention/entropy), one line per configuration (the
mean over its seeds) with the band between the seeds' lowest and highest value.

    .venv/bin/python studies/attention_claims_curves.py runs/claims/transformer_scaling \\
        --tags valid/loss train/grad_norm attention/entropy \\
        --out docs/results/attention_claims/transformer_scaling_curves.png

The configurations are those of `attnseq compare FOLDER` (attnseq/analysis/seed_groups.py):
runs grouped by their config without the seed, named by the overrides that differ. Prints the
JSON of the curves (step -> mean, min, max per configuration and scalar) on stdout.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from attnseq.analysis.seed_groups import is_sweep_folder, plan_groups  # noqa: E402
from attnseq.errors import UserError  # noqa: E402


def configurations(folder: Path) -> dict[str, list[Path]]:
    """Group name -> the runs (seeds) of each configuration of the sweep folder, grouped and
    named as `attnseq compare` groups them."""
    if not is_sweep_folder(folder):
        raise SystemExit(f"{folder} holds no runs (no */checkpoints/best.pt)")
    try:
        groups = plan_groups([folder])
    except UserError as error:
        raise SystemExit(f"error: {error}") from None
    return {group.name: [member.path for member in group.members] for group in groups}


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
    curves = {label: {tag: pooled(runs, tag) for tag in args.tags}
              for label, runs in groups.items()}  # fmt: skip
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
