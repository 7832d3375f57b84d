"""The figures (attnseq/analysis/figures.py): heatmaps titled, with horizontal short ticks and
fonts readable in saved and TensorBoard images, grids of layers and heads named on their outer
axes, long titles wrapped."""

import numpy as np

from attnseq.analysis.figures import (
    DPI,
    alignment_figure,
    attention_grid_figure,
    readable_token,
)


def test_heatmap_has_a_title_horizontal_short_ticks_and_readable_fonts() -> None:
    src = [*"ab c", "▁longword"]
    tgt = [*"xy", "</s>"]
    figure = alignment_figure(np.full((3, 5), 0.2), src, tgt, "ab c longword → xy")
    ax = figure.axes[0]
    assert ax.get_title() == "ab c longword → xy"
    rotations = {label.get_text(): label.get_rotation() for label in ax.get_xticklabels()}
    assert rotations == {"a": 0, "b": 0, "␣": 0, "c": 0, "_longword": 90}
    for label in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
        assert label.get_fontsize() * min(DPI, 100) / 72 >= 10  # pixels in saved and TB images
    assert readable_token(" ") == "␣"


def test_a_grid_names_the_tokens_on_its_outer_axes_only() -> None:
    """Layers are rows and heads columns: the bottom row names the source tokens, the left
    column the target tokens, and every cell is titled with its layer and head."""
    src, tgt = ["a", "b", "c"], ["x", "</s>"]
    figure = attention_grid_figure(np.full((2, 3, 2, 3), 1 / 3), src, tgt, "a b c → x")
    cells = [ax for ax in figure.axes if ax.get_title()]  # the colour bar has no title
    assert [ax.get_title() for ax in cells] == [
        f"layer {layer} head {head}" for layer in (1, 2) for head in (1, 2, 3)
    ]
    for index, ax in enumerate(cells):
        layer, head = divmod(index, 3)
        x_labels = [label.get_text() for label in ax.get_xticklabels()]
        y_labels = [label.get_text() for label in ax.get_yticklabels()]
        assert x_labels == (src if layer == 1 else []), (layer, head)
        assert y_labels == (tgt if head == 0 else []), (layer, head)


def test_long_titles_wrap_to_the_figure() -> None:
    title = "word " * 80 + "→ out"
    figure = alignment_figure(np.full((2, 2), 0.5), ["a", "b"], ["c", "</s>"], title)
    assert 2 <= len(figure.axes[0].get_title().splitlines()) <= 3
