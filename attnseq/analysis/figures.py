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


# about 0.3 inch per token at 11 pt, so 60-token sentences stay legible in a saved figure
FILE_CELL = 0.3 * 72 / 11


@dataclass(frozen=True)
class Style:
    """How heatmaps look: figure size in inches (None: from the number of tokens), the font
    size of tick labels in points (titles and axis labels a little larger), the colormap, and
    the side of a token's cell in units of the font size (when the size follows the tokens)."""

    figsize: tuple[float, float] | None = None
    fontsize: float = 11.0
    cmap: str = "viridis"
    cell: float = FILE_CELL


DEFAULT_STYLE = Style()
# TensorBoard's IMAGES tab shows every image 350 pixels wide, whatever its size: cells just
# large enough for a turned label keep a sentence's figure narrow, so that its words stay
# readable at that width (the figures are drawn at 100 dpi)
TENSORBOARD_STYLE = Style(cell=1.35)
TENSORBOARD_WIDTH = 5.0  # inches (500 pixels): as wide as a figure of heads side by side grows


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


def _token_inches(style: Style) -> float:
    """The side of a token's cell: `style.cell` times the font size (at least 6 pt)."""
    return style.cell * max(style.fontsize, 6.0) / 72


def _cell_inches(n_src: int, n_tgt: int, style: Style = DEFAULT_STYLE) -> tuple[float, float]:
    # the tokens plus room for the labels and the colour bar; bounded for huge inputs
    cell = _token_inches(style)
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


def colour_limits(*maps: np.ndarray) -> tuple[float, float]:
    """(vmin, vmax) of a colour scale that holds every weight of `maps`: from 0 (attention
    weights are >= 0; linformer's effective weights may be negative) to the largest."""
    low = min((float(np.min(m)) for m in maps if np.size(m)), default=0.0)
    high = max((float(np.max(m)) for m in maps if np.size(m)), default=0.0)
    return min(low, 0.0), max(high, 1e-6)


def _draw(
    ax,
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None,
    style: Style = DEFAULT_STYLE,
    x_labels: bool = True,
    y_labels: bool = True,
    limits: tuple[float, float] | None = None,
):
    """The heatmap on `ax`; `x_labels`/`y_labels`: whether that axis names its tokens (a grid
    names them on its outer axes only) or has no ticks; `limits`: the colour scale (vmin,
    vmax), by default the map's own (`colour_limits`)."""
    fontsize = style.fontsize
    vmin, vmax = limits or colour_limits(weights)
    image = ax.imshow(
        weights,
        cmap=style.cmap,
        vmin=vmin,
        vmax=vmax,
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
    limits: tuple[float, float] | None = None,
) -> Figure:
    """One heatmap with a colour bar, and optionally the p_gen strip.

    Args:
        weights: (T, S) attention weights, T = len(tgt_tokens), S = len(src_tokens).
        title: e.g. "source → output"; wrapped to the figure's width.
        p_gen: (T,) generation probability of every row (copy models).
        limits: the colour scale (vmin, vmax); None: from 0 to the map's largest weight.
    """
    weights = np.asarray(weights, dtype=np.float32)
    width, height = style.figsize or _cell_inches(len(src_tokens), len(tgt_tokens), style)
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
    image = _draw(ax, weights, src_tokens, tgt_tokens, title, style=style, limits=limits)
    _colour_bar(figure, image, ax, style, 0.04)
    if p_gen is not None:
        _draw_p_gen(strip, np.asarray(p_gen, dtype=np.float32), len(tgt_tokens), style.fontsize)
    return figure


def _colour_bar(figure: Figure, image, axes, style: Style, fraction: float) -> None:
    """The colour bar of `image` beside `axes`, its tick labels at the figure's font size: a
    few round values and its top, the largest weight the scale holds, so that it states its
    range; every label with the same decimals, enough to tell the ticks apart."""
    colorbar = figure.colorbar(image, ax=axes, fraction=fraction, pad=0.02)
    ticks, labels = colour_ticks(*image.get_clim())
    colorbar.set_ticks(ticks, labels=labels)
    colorbar.ax.tick_params(labelsize=style.fontsize - 1)


def colour_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """The ticks of a colour bar from `low` to `high` and their labels: round values (MaxNLocator's)
    and `high` itself, a round value too close below it left out."""
    from matplotlib.ticker import MaxNLocator

    span = max(high - low, 1e-12)
    step_ticks = MaxNLocator(4).tick_values(low, high)
    ticks = [float(t) for t in step_ticks if low - 1e-9 <= t <= high - 0.15 * span] + [high]
    step = float(step_ticks[1] - step_ticks[0]) if len(step_ticks) > 1 else span
    # the decimals that write the step whole (0.25: 2), more where the top reads as its neighbour
    decimals = next((d for d in range(1, 7) if abs(round(step, d) - step) < 1e-3 * step), 6)
    while decimals < 6 and len({f"{t:.{decimals}f}" for t in ticks}) < len(ticks):
        decimals += 1
    return ticks, [f"{t:.{decimals}f}" for t in ticks]


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
    maps = [
        (f"layer {layer + 1} head {head + 1}", weights[layer, head])
        for layer in range(layers)
        for head in range(heads)
    ]
    return _maps_figure(maps, heads, src_tokens, tgt_tokens, title, style, every_row=False)


def layer_figure(
    weights: np.ndarray,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None = None,
    style: Style = DEFAULT_STYLE,
    limits: tuple[float, float] | None = None,
    width: float = TENSORBOARD_WIDTH,
) -> Figure:
    """The heads of one layer side by side, each titled "head H" and naming its tokens: as
    many in a row as fit in `width` inches with their labels readable, the rest in the rows
    below (one head per row when a row of two would be wider than `width`).

    Args:
        weights: (H, T, S) attention weights of the layer's heads.
        limits: the colour scale (vmin, vmax) of every head; None: from 0 to the layer's
            largest weight.
    """
    weights = np.asarray(weights, dtype=np.float32)
    heads = weights.shape[0]
    head_width = _token_inches(style) * len(src_tokens) + _HEAD_GAP
    columns = max(1, min(heads, int((width - _LABEL_ROOM) // head_width)))
    maps = [(f"head {head + 1}", weights[head]) for head in range(heads)]
    return _maps_figure(
        maps, columns, src_tokens, tgt_tokens, title, style, every_row=True, limits=limits
    )


_HEAD_GAP = 0.3  # inches between two maps side by side
_LABEL_ROOM = 2.0  # inches of a figure of maps for the target labels and the colour bar


def _maps_figure(
    maps: Sequence[tuple[str, np.ndarray]],
    columns: int,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    title: str | None,
    style: Style,
    every_row: bool,
    limits: tuple[float, float] | None = None,
) -> Figure:
    """Titled (T, S) maps of the same tokens in rows of `columns`, under one colour bar: the
    left column names the target tokens, the bottom row the source tokens, or every row
    (`every_row`: each map can be read on its own)."""
    rows = -(-len(maps) // columns)
    token = _token_inches(style)
    # each cell: its tokens, a gap and its title (and its source labels); the rest once
    label_height = _label_inches(src_tokens, style.fontsize) if every_row else 0.0
    width = columns * (token * len(src_tokens) + _HEAD_GAP) + _LABEL_ROOM
    height = rows * (token * len(tgt_tokens) + 0.5 + label_height) + 1.6
    size = style.figsize or (min(max(width, 3.5), 60), min(max(height, 2.5), 60))
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    limits = limits or colour_limits(*(matrix for _, matrix in maps))
    for index, (name, matrix) in enumerate(maps):
        row, column = divmod(index, columns)
        image = _draw(
            axes[row][column],
            matrix,
            src_tokens,
            tgt_tokens,
            name,
            style=style,
            x_labels=every_row or row == rows - 1,
            y_labels=column == 0,
            limits=limits,
        )
    for index in range(len(maps), rows * columns):  # the last row's empty places
        axes[index // columns][index % columns].set_axis_off()
    _colour_bar(figure, image, axes, style, 0.02)
    if title:
        figure.suptitle(_wrapped(title, size[0], style.fontsize + 2), fontsize=style.fontsize + 2)
    return figure


def _label_inches(tokens: Sequence[str], fontsize: float) -> float:
    """The height of a row of source labels: one line, or the longest label turned."""
    longest = max((len(readable_token(t)) for t in tokens), default=1)
    characters = longest if longest > SHORT_LABEL else 1
    return (0.6 * characters + 1.5) * fontsize / 72


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
