"""The figures (attnseq/analysis/figures.py): heatmaps titled, with horizontal short ticks and
fonts readable in saved and TensorBoard images, grids of layers and heads named on their outer
axes, one figure per layer with its heads labelled, colour bars whose labels show whole, long
titles wrapped."""

import numpy as np
import pytest

from attnseq.analysis.figures import (
    DPI,
    TENSORBOARD_STYLE,
    alignment_figure,
    attention_grid_figure,
    figure_to_array,
    layer_figure,
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


def _colour_bar_labels(figure) -> list[str]:
    """The tick labels of a figure's colour bar (its last axes), after checking that each lies
    whole inside the rendered figure."""
    figure_to_array(figure)  # drawn, so the labels have their places
    renderer = figure.canvas.get_renderer()
    box = figure.bbox
    labels = [label for label in figure.axes[-1].get_yticklabels() if label.get_text()]
    for label in labels:
        extent = label.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1, label.get_text()
        assert box.y0 <= extent.y0 and extent.y1 <= box.y1, label.get_text()
    return [label.get_text() for label in labels]


@pytest.mark.parametrize("tokens", [["a"], ["March", "3,", "1998"]])
def test_the_colour_bar_shows_its_range_with_every_label_whole(tokens: list[str]) -> None:
    weights = np.full((2, len(tokens)), 0.15)
    weights[0, 0] = 0.26
    labels = _colour_bar_labels(alignment_figure(weights, tokens, ["x", "</s>"], "a → x"))
    assert labels[0] == "0.00" and labels[-1] == "0.26"  # the range, in the data's decimals
    assert len({len(label) for label in labels}) == 1  # one number of decimals for all


@pytest.mark.slow
def test_a_layer_figure_puts_its_heads_side_by_side_each_labelled() -> None:
    """At TensorBoard's size: the heads of a short sentence in one row, a long sentence's one
    under the other, each titled and naming its tokens; no figure wider than about 500 px
    (TensorBoard shows an image about 350 px wide: a wider one shrinks its words away)."""
    src, tgt = ["Mann", "."], ["man", "</s>"]
    weights = np.random.default_rng(0).dirichlet(np.ones(2), size=(4, 2))  # (H, T, S)
    figure = layer_figure(weights, src, tgt, "Mann . → man", TENSORBOARD_STYLE)
    cells = [ax for ax in figure.axes if ax.get_title()]
    assert [ax.get_title() for ax in cells] == ["head 1", "head 2", "head 3", "head 4"]
    assert len({round(ax.get_position().y0, 3) for ax in cells}) == 1  # one row
    for ax in cells:  # each head names its source tokens, the first its target tokens
        assert [label.get_text() for label in ax.get_xticklabels()] == src
    assert [label.get_text() for label in cells[0].get_yticklabels()] == tgt
    assert figure_to_array(figure).shape[1] <= 520
    long = [f"w{i}" for i in range(12)]
    weights = np.full((4, 2, 12), 1 / 12)
    figure = layer_figure(weights, long, tgt, "w0 ... w11 → man", TENSORBOARD_STYLE)
    cells = [ax for ax in figure.axes if ax.get_title()]
    assert len({round(ax.get_position().x0, 3) for ax in cells}) == 1  # one column
    assert figure_to_array(figure).shape[1] <= 520
