"""`plot_alignment`: a heatmap of any result with attention, as visualize-alignment draws it."""

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from torch import Tensor

from attnseq.alignment.forced import ForcedAlignments
from attnseq.alignment.word_links import check_layer_and_head
from attnseq.analysis.alignment_view import AttentionMap, draw, merge_words
from attnseq.analysis.figures import style_from_options
from attnseq.api import arguments
from attnseq.api.results import TranslatedHypothesis, Translation
from attnseq.errors import UserError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# What `plot_alignment` draws: the types, and the message for any other
Plottable = (
    AttentionMap
    | Translation
    | TranslatedHypothesis
    | ForcedAlignments
    | tuple[Tensor | np.ndarray, Sequence[str], Sequence[str]]
)
PLOTTABLE = (
    "attention must be an AttentionMap (Model.attention), a Translation or a "
    "TranslatedHypothesis (Model.translate(..., attention=True)), the ForcedAlignments of one "
    "pair (Model.align) or a (weights, source pieces, target pieces) tuple"
)


def plot_alignment(
    attention: Plottable,
    *,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
    words: bool = False,
    title: str | None = None,
    figsize: str | None = None,
    fontsize: float = 11.0,
    cmap: str = "viridis",
) -> "Figure":
    """A heatmap of `attention` as a matplotlib Figure, which Jupyter shows inline: for a
    transformer the mean of the last layer's heads, or `layer`/`head` (from 1), or every layer
    and head (`all_heads`); `words` merges subword pieces into words; `figsize` "W,H" in
    inches (each up to 100), `fontsize` 1..72 points, `cmap` a matplotlib colormap. The figure
    visualize-alignment saves.

    `attention` is one of: `Model.attention`'s map; a `Translation` (its best output) or a
    `TranslatedHypothesis` of `Model.translate(..., attention=True)`; the `ForcedAlignments`
    of one pair (`Model.align`: its word matrix, rows the target words); or a tuple (weights,
    source pieces, target pieces) with weights a tensor or array of shape (T, S) or
    (L, H, T, S), T the target pieces and S the source pieces (each piece a word of its own
    for `words`).

    Raises:
        TypeError: `attention` is none of those, or another argument of the wrong type.
        UserError: a translation without attention or output, alignments of several pairs,
            weights whose shape does not match the pieces, a layer or head out of the model's
            range, or a style out of range.
    """
    if not isinstance(attention, AttentionMap | Translation | TranslatedHypothesis) and not (
        isinstance(attention, ForcedAlignments)
        or (isinstance(attention, tuple) and len(attention) == 3)
    ):
        raise TypeError(f"{PLOTTABLE}, not {type(attention).__name__}")
    layer = arguments.integer(layer, "layer", optional=True)
    head = arguments.integer(head, "head", optional=True)
    arguments.flag(all_heads, "all_heads")
    arguments.flag(words, "words")
    arguments.text(title, "title", optional=True)
    arguments.text(figsize, "figsize", optional=True)
    fontsize = arguments.number(fontsize, "fontsize", low=1.0, high=72.0)  # type: ignore[assignment]
    arguments.text(cmap, "cmap")
    _show_figures_inline_in_ipython()
    attention = plotted_map(attention)
    weights = attention.weights
    layers, heads = weights.shape[:2] if weights.ndim == 4 else (1, 1)
    check_layer_and_head(layer, head, layers, heads, "" if weights.ndim == 4 else "one map")
    if words:
        attention = merge_words(attention)
    style = style_from_options(figsize, fontsize, cmap)  # the messages name the arguments
    return draw(attention, layer=layer, head=head, all_heads=all_heads, title=title, style=style)


def plotted_map(attention: Plottable) -> AttentionMap:
    """The map `plot_alignment` draws of `attention` (its docstring says what it takes)."""
    if isinstance(attention, Translation):
        if not attention.hypotheses:
            raise UserError("this translation has no output (its source is blank): no attention")
        return attention.hypotheses[0].attention_map()
    if isinstance(attention, TranslatedHypothesis):
        return attention.attention_map()
    if isinstance(attention, ForcedAlignments):
        return _alignment_map(attention)
    if isinstance(attention, tuple):
        return _pieces_map(*attention)
    return attention


def _alignment_map(result: ForcedAlignments) -> AttentionMap:
    """The word matrix of an alignment of one pair, labelled by the pair's words."""
    if len(result.soft) != 1:
        raise UserError(
            f"attention holds the alignments of {len(result.soft)} pairs; plot one pair: "
            "Model.align(src, tgt) with one str each"
        )
    matrix = result.soft[0]  # (Tw, Sw)
    rows = result.target_words[0] if result.target_words else None
    columns = result.source_words[0] if result.source_words else None
    rows = rows or [str(index) for index in range(matrix.shape[0])]
    columns = columns or [str(index) for index in range(matrix.shape[1])]
    return AttentionMap(
        matrix, rows, columns, "word", "word", source=" ".join(columns), output=" ".join(rows)
    )


def _pieces_map(weights: object, source: object, target: object) -> AttentionMap:
    """The map of a (weights, source pieces, target pieces) tuple: weights (T, S) or
    (L, H, T, S), a tensor or an array."""
    if isinstance(weights, Tensor):
        array = weights.detach().float().cpu().numpy()
    elif isinstance(weights, np.ndarray) and weights.dtype.kind in "fiub":
        array = weights.astype(np.float32)
    else:
        raise TypeError(
            "attention[0] must be the weights, a torch.Tensor or a numpy array of numbers, "
            f"not {type(weights).__name__}"
        )
    columns = arguments.strings(source, "attention[1]", "the source pieces ['a', 'b']")
    rows = arguments.strings(target, "attention[2]", "the target pieces ['x', 'y']")
    if array.ndim not in (2, 4) or array.shape[-2:] != (len(rows), len(columns)):
        raise UserError(
            f"attention[0] has shape {tuple(array.shape)}; with {len(rows)} target and "
            f"{len(columns)} source pieces it must be ({len(rows)}, {len(columns)}) or "
            f"(layers, heads, {len(rows)}, {len(columns)})"
        )
    if not rows or not columns:
        raise UserError("attention[1] and attention[2] must each hold at least one piece")
    if not np.isfinite(array).all():
        raise UserError("attention[0] holds NaN or infinite weights")
    return AttentionMap(
        array, rows, columns, "word", "word", source=" ".join(columns), output=" ".join(rows)
    )


def _show_figures_inline_in_ipython() -> None:
    """In IPython or Jupyter, display a matplotlib Figure as a PNG, as `%matplotlib inline`
    arranges for pyplot's figures: attnseq draws on plain `Figure` objects (never pyplot), which
    a kernel would otherwise show as their text repr. Does nothing outside IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(Figure, lambda figure: print_figure(figure, "png"))
