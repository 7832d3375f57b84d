"""Attention heatmaps: matplotlib figures (Agg, no display) and their TensorBoard images.

Rows are target tokens (what the model produced or was forced to read), columns are source
tokens; each cell is the weight a_ts. For copy models (pointer-generators) a strip to the right
shows p_gen of every row: 1 = the token was generated from the vocabulary, 0 = copied from the
source (See et al. 2017, eq. 8). Figures are drawn with `matplotlib.figure.Figure` and
the Agg canvas directly, never pyplot, so nothing depends on a display or global state.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# how tokens are shown on the axes: make whitespace and sentencepiece's marker visible
_READABLE = {" ": "␣", "\t": "⇥", "\n": "↵"}


def readable_token(token: str) -> str:
    if token in _READABLE:
        return _READABLE[token]
    return token.replace("▁", "_") if token != "▁" else "_"


def _cell_inches(n_src: int, n_tgt: int) -> tuple[float, float]:
    # about 0.3 inch per token, so 60-token sentences stay legible; bounded for huge inputs
    width = min(max(3.0, 0.3 * n_src + 1.5), 40.0)
    height = min(max(2.5, 0.3 * n_tgt + 1.2), 40.0)
    return width, height


def _draw(
    ax,
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None,
    labels: bool = True,
):
    image = ax.imshow(
        weights,
        cmap="viridis",
        # attention weights are >= 0; linformer's effective weights may be negative
        vmin=min(float(weights.min()), 0.0),
        vmax=max(float(weights.max()), 1e-6),
        aspect="auto",
        interpolation="nearest",
    )
    if labels:
        ax.set_xticks(
            range(len(src_tokens)), [readable_token(t) for t in src_tokens], rotation=90, fontsize=8
        )
        ax.set_yticks(range(len(tgt_tokens)), [readable_token(t) for t in tgt_tokens], fontsize=8)
        ax.set_xlabel("source")
        ax.set_ylabel("target")
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return image


def alignment_figure(
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None = None,
    p_gen: np.ndarray | None = None,
) -> Figure:
    """One heatmap with a colour bar, and optionally the p_gen strip.

    Args:
        weights: (T, S) attention weights, T = len(tgt_tokens), S = len(src_tokens).
        p_gen: (T,) generation probability of every row (copy models).
    """
    weights = np.asarray(weights, dtype=np.float32)
    width, height = _cell_inches(len(src_tokens), len(tgt_tokens))
    if p_gen is None:
        figure = Figure(figsize=(width, height), layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = Figure(figsize=(width + 1.0, height), layout="constrained")
        # the strip is about two source columns wide, whatever the source length
        ax, strip = figure.subplots(
            1, 2, gridspec_kw={"width_ratios": [max(len(src_tokens), 1), 2.0]}
        )
    image = _draw(ax, weights, src_tokens, tgt_tokens, title)
    figure.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    if p_gen is not None:
        _draw_p_gen(strip, np.asarray(p_gen, dtype=np.float32), len(tgt_tokens))
    return figure


def _draw_p_gen(ax, p_gen: np.ndarray, rows: int) -> None:
    """p_gen (T,) as a one-column heatmap (0 = copy, 1 = generate) with its values written in."""
    values = p_gen.reshape(-1, 1)[:rows]  # (T, 1)
    ax.imshow(values, cmap="coolwarm_r", vmin=0.0, vmax=1.0, aspect="auto")
    for row, value in enumerate(values[:, 0]):
        ax.text(0, row, f"{value:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks([0], ["1 = generate\n0 = copy"], fontsize=7)
    ax.set_yticks([])
    ax.set_title("p_gen", fontsize=9)


def attention_grid_figure(
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None = None,
) -> Figure:
    """A grid of heatmaps, one per layer (rows) and head (columns).

    Args:
        weights: (L, H, T, S) attention weights.
    """
    weights = np.asarray(weights, dtype=np.float32)
    layers, heads = weights.shape[:2]
    width, height = _cell_inches(len(src_tokens), len(tgt_tokens))
    figure = Figure(
        figsize=(min(width * heads, 60), min(height * layers, 60)), layout="constrained"
    )
    axes = figure.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            image = _draw(
                axes[layer][head],
                weights[layer, head],
                src_tokens,
                tgt_tokens,
                f"layer {layer + 1} head {head + 1}",
                labels=True,
            )
    figure.colorbar(image, ax=axes, fraction=0.02, pad=0.01)
    if title:
        figure.suptitle(title)
    return figure


def figure_to_array(figure: Figure) -> np.ndarray:
    """Render to an (H, W, 3) uint8 RGB image."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def save_figure(figure: Figure, path: str | Path) -> Path:
    """Write png/svg/pdf (by suffix) atomically."""
    from attnseq.atomic import atomic_write

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    FigureCanvasAgg(figure)
    atomic_write(path, lambda handle: figure.savefig(handle, format=fmt, dpi=120))
    return path


def log_heatmap(writer, tag: str, figure: Figure, step: int) -> None:
    """Add the figure to TensorBoard as an image under a stable tag (the step slider then
    shows the same example's alignment sharpening over training)."""
    writer.add_image(tag, figure_to_array(figure), step, dataformats="HWC")
