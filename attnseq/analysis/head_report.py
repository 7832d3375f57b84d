"""Head importance shown: a rich table per attention kind (rows = layers, one column per head,
each cell "normalized gradient / loss increase") and a matplotlib figure, one heatmap per measure
and kind (layers x heads, values written in the cells, pruned heads marked with an x).

Figures are drawn on `matplotlib.figure.Figure` with the Agg canvas (figures.py), never pyplot.
"""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from rich.table import Table

from attnseq.analysis.figures import save_figure
from attnseq.analysis.head_importance import HeadImportance
from attnseq.models.head_mask import KIND_TITLES, KINDS

_PANELS = (
    ("gradient_normalized", "gradient E|dL/dxi| (l2-normalized per layer)", "viridis"),
    ("ablation", "loss increase when masked alone", "magma"),
)


def importance_tables(importance: HeadImportance) -> list[Table]:
    """One rich table per kind present: a row per layer, a column per head."""
    tables = []
    for kind in KINDS:
        gradient = importance.gradient_normalized[kind]
        if not gradient.numel():
            continue
        ablation, masks = importance.ablation[kind], importance.masks[kind]
        table = Table(
            title=KIND_TITLES[kind],
            title_justify="left",
            caption="normalized gradient / loss increase",
            caption_justify="left",
        )
        table.add_column("layer", justify="right")
        for head in range(gradient.size(1)):
            table.add_column(f"head {head}", justify="right")
        for layer in range(gradient.size(0)):
            cells = [
                "pruned"
                if masks[layer, head] == 0
                else f"{gradient[layer, head]:.3f} / {ablation[layer, head]:+.4f}"
                for head in range(gradient.size(1))
            ]
            table.add_row(str(layer), *cells)
        tables.append(table)
    return tables


def importance_figure(importance: HeadImportance, title: str) -> Figure:
    """Heatmaps, one row per measure and one column per kind (layers x heads)."""
    kinds = [kind for kind in KINDS if importance.masks[kind].numel()]
    layers = max(importance.masks[kind].size(0) for kind in kinds)
    heads = importance.masks[kinds[0]].size(1)
    cell = 0.7
    width = 1.5 + len(kinds) * (1.2 + heads * cell)
    figure = Figure(figsize=(width, 1.2 + len(_PANELS) * (1.2 + layers * cell)))
    figure.suptitle(title)
    axes = figure.subplots(len(_PANELS), len(kinds), squeeze=False)
    for row, (attribute, label, cmap) in enumerate(_PANELS):
        for column, kind in enumerate(kinds):
            values = getattr(importance, attribute)[kind].numpy()
            _heatmap(axes[row][column], values, importance.masks[kind].numpy(), cmap)
            axes[row][column].set_title(f"{KIND_TITLES[kind]}\n{label}", fontsize=8)
    figure.tight_layout()
    return figure


def _heatmap(ax, values: np.ndarray, masks: np.ndarray, cmap: str) -> None:  # type: ignore[no-untyped-def]
    """One (layers, heads) heatmap with the value in each cell; pruned heads show an x."""
    image = ax.imshow(values, cmap=cmap, aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    span = float(values.max() - values.min()) or 1.0
    for layer in range(values.shape[0]):
        for head in range(values.shape[1]):
            pruned = masks[layer, head] == 0
            text = "x" if pruned else f"{values[layer, head]:.2g}"
            light = (values[layer, head] - values.min()) / span < 0.5
            ax.text(head, layer, text, ha="center", va="center", fontsize=7,
                    color="white" if light else "black")  # fmt: skip


def write_figure(importance: HeadImportance, path: Path, title: str) -> Path:
    """Save `importance_figure` as a PNG at `path`."""
    return save_figure(importance_figure(importance, title), path)
