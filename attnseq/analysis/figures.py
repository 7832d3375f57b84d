"""Attention heatmaps and their TensorBoard images, drawn on the Agg canvas of a
`matplotlib.figure.Figure`, never pyplot: nothing depends on a display or global state."""

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# how tokens are shown on the axes: whitespace and sentencepiece's word marker made visible,
# with glyphs DejaVu Sans (matplotlib's default font) has. The open box of a space reads as a
# "u" when turned, which is one reason short labels stay horizontal.
_READABLE = {" ": "␣", "\t": "⇥", "\n": "↵"}
SHORT_LABEL = 3  # tick labels up to this many characters stay horizontal
DPI = 120  # saved files


@dataclass(frozen=True)
class Style:
    """How heatmaps look: figure size in inches (None: from the number of tokens), the font
    size of tick labels in points (titles and axis labels a little larger), the colormap."""

    figsize: tuple[float, float] | None = None
    fontsize: float = 11.0
    cmap: str = "viridis"


DEFAULT_STYLE = Style()


def readable_token(token: str) -> str:
    if token in _READABLE:
        return _READABLE[token]
    return token.replace("▁", "_") if token != "▁" else "_"


def style_from_options(
    figsize: str | None,
    fontsize: float,
    cmap: str,
    names: tuple[str, str, str] = ("figsize", "fontsize", "cmap"),
) -> Style:
    """A Style from text settings: figsize "W,H" (or "WxH") in inches, fontsize in points,
    a matplotlib colormap name. `names`: what the messages call the three (by default the
    arguments; a command passes its options).

    Raises:
        UserError: naming the setting and, for a colormap, some valid ones.
    """
    import matplotlib

    from attnseq.errors import UserError

    figsize_name, fontsize_name, cmap_name = names
    size = None
    if figsize is not None:
        parts = figsize.replace("x", ",").split(",")
        try:
            size = (float(parts[0]), float(parts[1])) if len(parts) == 2 else None
        except ValueError:
            size = None
        if size is None or not (0 < size[0] <= 100 and 0 < size[1] <= 100):
            raise UserError(
                f"{figsize_name} must be W,H in inches (each 0-100), e.g. 8,5; got {figsize!r}"
            )
    if not 1 <= fontsize <= 72:
        raise UserError(f"{fontsize_name} must be between 1 and 72 points, got {fontsize}")
    if cmap not in matplotlib.colormaps:
        examples = ", ".join(["viridis", "magma", "cividis", "Blues", "Greys", "YlGnBu"])
        raise UserError(f"{cmap_name}: unknown colormap {cmap!r}; matplotlib has e.g. {examples}")
    return Style(figsize=size, fontsize=fontsize, cmap=cmap)


def _token_inches(fontsize: float) -> float:
    # about 0.3 inch per token at 11 pt (scaled with the font), so 60-token sentences stay
    # legible
    return 0.3 * max(fontsize, 6.0) / 11.0


def _cell_inches(n_src: int, n_tgt: int, fontsize: float = 11.0) -> tuple[float, float]:
    # the tokens plus room for the labels and the colour bar; bounded for huge inputs
    cell = _token_inches(fontsize)
    width = min(max(3.5, cell * n_src + 2.0), 40.0)
    height = min(max(2.5, cell * n_tgt + 1.6), 40.0)
    return width, height


def _wrapped(title: str, width_inches: float, fontsize: float) -> str:
    """The title in lines that fit the figure (about 0.6 em per character), at most 3."""
    per_line = max(int(width_inches * 72 / (0.6 * fontsize)), 20)
    lines = textwrap.wrap(title, per_line, replace_whitespace=False, drop_whitespace=True)
    if len(lines) > 3:
        lines = [*lines[:2], lines[2][: per_line - 1] + "…"]
    return "\n".join(lines)


def _tick_labels(ax, axis: str, tokens: Sequence[str], fontsize: float) -> None:
    labels = [readable_token(t) for t in tokens]
    if axis == "x":
        ax.set_xticks(range(len(labels)), labels, fontsize=fontsize)
        for label in ax.get_xticklabels():
            if len(label.get_text()) > SHORT_LABEL:  # only long labels turn
                label.set_rotation(90)
    else:
        ax.set_yticks(range(len(labels)), labels, fontsize=fontsize)


def _draw(
    ax,
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None,
    style: Style = DEFAULT_STYLE,
    x_labels: bool = True,
    y_labels: bool = True,
):
    """The heatmap on `ax`; `x_labels`/`y_labels`: whether that axis names its tokens (a grid
    names them on its outer axes only) or has no ticks."""
    fontsize = style.fontsize
    image = ax.imshow(
        weights,
        cmap=style.cmap,
        # attention weights are >= 0; linformer's effective weights may be negative
        vmin=min(float(weights.min()), 0.0),
        vmax=max(float(weights.max()), 1e-6),
        aspect="auto",
        interpolation="nearest",
    )
    if x_labels:
        _tick_labels(ax, "x", src_tokens, fontsize)
        ax.set_xlabel("source", fontsize=fontsize)
    else:
        ax.set_xticks([])
    if y_labels:
        _tick_labels(ax, "y", tgt_tokens, fontsize)
        ax.set_ylabel("target", fontsize=fontsize)
    else:
        ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=fontsize + 1)
    return image


def alignment_figure(
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None = None,
    p_gen: np.ndarray | None = None,
    style: Style = DEFAULT_STYLE,
) -> Figure:
    """One heatmap with a colour bar, and optionally the p_gen strip.

    Args:
        weights: (T, S) attention weights, T = len(tgt_tokens), S = len(src_tokens).
        title: e.g. "source → output"; wrapped to the figure's width.
        p_gen: (T,) generation probability of every row (copy models).
    """
    weights = np.asarray(weights, dtype=np.float32)
    width, height = style.figsize or _cell_inches(len(src_tokens), len(tgt_tokens), style.fontsize)
    if title:
        title = _wrapped(title, width, style.fontsize + 1)
    if p_gen is None:
        figure = Figure(figsize=(width, height), layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = Figure(figsize=(width + 1.0, height), layout="constrained")
        # the strip is about two source columns wide, whatever the source length
        ax, strip = figure.subplots(
            1, 2, gridspec_kw={"width_ratios": [max(len(src_tokens), 1), 2.0]}
        )
    image = _draw(ax, weights, src_tokens, tgt_tokens, title, style=style)
    colorbar = figure.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    colorbar.ax.tick_params(labelsize=style.fontsize - 1)
    if p_gen is not None:
        _draw_p_gen(strip, np.asarray(p_gen, dtype=np.float32), len(tgt_tokens), style.fontsize)
    return figure


def _draw_p_gen(ax, p_gen: np.ndarray, rows: int, fontsize: float = 11.0) -> None:
    """p_gen (T,) as a one-column heatmap (0 = copy, 1 = generate) with its values written in."""
    values = p_gen.reshape(-1, 1)[:rows]  # (T, 1)
    ax.imshow(values, cmap="coolwarm_r", vmin=0.0, vmax=1.0, aspect="auto")
    for row, value in enumerate(values[:, 0]):
        ax.text(0, row, f"{value:.2f}", ha="center", va="center", fontsize=fontsize - 2)
    ax.set_xticks([0], ["1 = generate\n0 = copy"], fontsize=fontsize - 2)
    ax.set_yticks([])
    ax.set_title("p_gen", fontsize=fontsize)


def attention_grid_figure(
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None = None,
    style: Style = DEFAULT_STYLE,
) -> Figure:
    """A grid of heatmaps, one per layer (rows) and head (columns). Every cell has the same
    tokens, so only the bottom row names the source tokens and only the left column the
    target tokens: the grid reads like one table, and matplotlib lays out one set of labels
    per row and column instead of one per cell (a 6 x 8 grid of 25 tokens draws in a third
    of the time).

    Args:
        weights: (L, H, T, S) attention weights.
    """
    weights = np.asarray(weights, dtype=np.float32)
    layers, heads = weights.shape[:2]
    token = _token_inches(style.fontsize)
    # each cell: its tokens, a gap and its title; the labels and colour bar once
    width = heads * (token * len(src_tokens) + 0.3) + 2.0
    height = layers * (token * len(tgt_tokens) + 0.5) + 1.6
    size = style.figsize or (min(max(width, 3.5), 60), min(max(height, 2.5), 60))
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            image = _draw(
                axes[layer][head],
                weights[layer, head],
                src_tokens,
                tgt_tokens,
                f"layer {layer + 1} head {head + 1}",
                style=style,
                x_labels=layer == layers - 1,
                y_labels=head == 0,
            )
    figure.colorbar(image, ax=axes, fraction=0.02, pad=0.01)
    if title:
        figure.suptitle(_wrapped(title, size[0], style.fontsize + 2), fontsize=style.fontsize + 2)
    return figure


def figure_to_array(figure: Figure) -> np.ndarray:
    """Render to an (H, W, 3) uint8 RGB image."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def figure_png(figure: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes, drawn by the Agg canvas (no pyplot): what a notebook shows
    inline (`_repr_html_` of the API's results). 100 dpi, as TensorBoard's images: a
    screen's size, not a print's."""
    from io import BytesIO

    buffer = BytesIO()
    FigureCanvasAgg(figure)
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def save_figure(figure: Figure, path: str | Path) -> Path:
    """Write png/svg/pdf (by suffix) atomically."""
    from attnseq.io.atomic import atomic_write

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    FigureCanvasAgg(figure)
    atomic_write(path, lambda handle: figure.savefig(handle, format=fmt, dpi=DPI))
    return path


def log_heatmap(writer, tag: str, figure: Figure, step: int) -> None:
    """Add the figure to TensorBoard as an image under a stable tag (the step slider then
    shows the same example's alignment sharpening over training)."""
    writer.add_image(tag, figure_to_array(figure), step, dataformats="HWC")
