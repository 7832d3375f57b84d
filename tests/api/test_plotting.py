"""`plot_alignment`: a Figure of every result with attention (a hypothesis, a translation, an
alignment, a map, a tuple of weights and pieces), the layer and head it is asked for, and what
it takes."""

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import attnseq

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCE = "June 5, 2001"


@pytest.mark.slow
def test_plot_alignment_returns_a_figure(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["transformer"], "cpu", threads=1)
    hypothesis = model.translate(SOURCE, attention=True).hypotheses[0]
    figure = attnseq.plot_alignment(hypothesis, layer=2, head=2)
    assert isinstance(figure, Figure)
    assert "(layer 2, head 2)" in " ".join(figure.axes[0].get_title().split())
    grid = attnseq.plot_alignment(model.attention(SOURCE), all_heads=True)
    assert len([axis for axis in grid.axes if axis.images]) == 4  # 2 layers x 2 heads
    with pytest.raises(attnseq.UserError, match="^head must be in 1..2"):
        attnseq.plot_alignment(hypothesis, head=3)
    without = model.translate(SOURCE).hypotheses[0]
    with pytest.raises(attnseq.UserError, match="attention=True"):
        attnseq.plot_alignment(without)


def heatmap(figure) -> np.ndarray:
    return np.asarray(figure.axes[0].images[0].get_array())


def tick_labels(figure, axis: str) -> list[str]:
    ticks = figure.axes[0].get_xticklabels() if axis == "x" else figure.axes[0].get_yticklabels()
    return [label.get_text() for label in ticks]


@pytest.mark.slow
def test_plot_alignment_draws_every_result(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["transformer"], "cpu", threads=1)
    translation = model.translate(SOURCE, beam=2, attention=True)
    best = translation.hypotheses[0]
    expected = best.attention[-1].mean(0).numpy()  # the last layer's head mean, (T, S)
    np.testing.assert_allclose(heatmap(attnseq.plot_alignment(translation)), expected, rtol=1e-6)
    np.testing.assert_allclose(heatmap(attnseq.plot_alignment(best)), expected, rtol=1e-6)
    alignment = model.align("June 5 , 2001", "2001 - 06 - 05")
    figure = attnseq.plot_alignment(alignment)
    np.testing.assert_array_equal(heatmap(figure), alignment.soft[0])
    assert tick_labels(figure, "x") == ["June", "5", ",", "2001"]
    assert tick_labels(figure, "y") == ["2001", "-", "06", "-", "05"]
    weights = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    for given in (weights, weights.numpy()):
        figure = attnseq.plot_alignment((given, ["a", "b"], ["x", "y", "z"]))
        np.testing.assert_array_equal(heatmap(figure), weights.numpy())
        assert tick_labels(figure, "x") == ["a", "b"] and tick_labels(figure, "y") == [
            "x",
            "y",
            "z",
        ]
    layered = torch.rand(2, 3, 3, 2)
    grid = attnseq.plot_alignment((layered, ["a", "b"], ["x", "y", "z"]), all_heads=True)
    assert len([axis for axis in grid.axes if axis.images]) == 6


def test_plot_alignment_says_what_it_takes(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["rnn"], "cpu", threads=1)
    accepted = (
        r"^attention must be an AttentionMap \(Model.attention\), a Translation or a "
        r"TranslatedHypothesis .*, the ForcedAlignments of one pair \(Model.align\) or a "
        r"\(weights, source pieces, target pieces\) tuple, not "
    )
    for wrong, kind in (
        ([1, 2, 3], "list"),
        ((1, 2), "tuple"),
        ("June", "str"),
        (None, "NoneType"),
    ):
        with pytest.raises(TypeError, match=accepted + kind + "$"):
            attnseq.plot_alignment(wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^attention\[0\] must be the weights"):
        attnseq.plot_alignment(([[0.5, 0.5]], ["a", "b"], ["x"]))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^attention\[1\] must be a list of str"):
        attnseq.plot_alignment((torch.ones(1, 2), "ab", ["x"]))
    with pytest.raises(attnseq.UserError, match=r"^attention\[0\] has shape \(3, 2\); with 2 tar"):
        attnseq.plot_alignment((torch.ones(3, 2), ["a", "b"], ["x", "y"]))
    with pytest.raises(attnseq.UserError, match="NaN or infinite"):
        attnseq.plot_alignment((torch.full((1, 2), float("nan")), ["a", "b"], ["x"]))
    two = model.align(["a b", "c d"], ["x y", "z w"])
    with pytest.raises(attnseq.UserError, match="alignments of 2 pairs; plot one pair"):
        attnseq.plot_alignment(two)
    with pytest.raises(attnseq.UserError, match="no output"):
        attnseq.plot_alignment(model.translate(" "))
    with pytest.raises(attnseq.UserError, match="attention=True"):
        attnseq.plot_alignment(model.translate(SOURCE))
