"""What the Python API's results look like in a notebook: one-line reprs (never a tensor dump),
a translation's heatmap and the explanation's page inline, ids and scores as tensors."""

import base64
import html
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

import attnseq
from attnseq.analysis.figures import figure_png
from attnseq.api.results import Translation
from attnseq.api.train import TrainResult
from attnseq.evaluation.scoring import PairScore

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

# a 50-word sentence, each word one the generated date task's characters spell
SENTENCE = " ".join(["June", "5", ",", "2001"] * 12 + ["May", "1"])
TARGET = " ".join(["2001", "-", "06", "-", "05"] * 10)
REPR_LIMIT = 300  # characters
SOURCE = "June 5, 2001"


def short(text: str) -> None:
    """A repr a notebook can show: one line, under REPR_LIMIT characters, no tensor dump."""
    assert "\n" not in text and len(text) < REPR_LIMIT, (len(text), text)
    assert "tensor(" not in text and "array(" not in text, text


# ------------------------------------------------------------------------------------ reprs
@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_every_result_has_a_short_repr(family: str, untrained_checkpoints: dict[str, Path]) -> None:
    assert len(SENTENCE.split()) == 50 and len(TARGET.split()) == 50
    model = attnseq.load(untrained_checkpoints[family], "cpu", threads=1)
    described = repr(model)
    short(described)
    parameters = sum(parameter.numel() for parameter in model.module.parameters())
    sizes = f"{model.tokenizers.src.vocab_size}/{model.tokenizers.tgt.vocab_size}"
    for part in (family, f"{parameters:,} parameters", sizes, "on cpu", str(model.path)):
        assert part in described
    translation = model.translate(SENTENCE, beam=3, nbest=2, attention=True)
    best = translation.hypotheses[0]
    short(repr(translation))
    short(repr(best))
    assert f"score={best.score:.4f}" in repr(best)
    assert f"attention {tuple(best.attention.shape)}" in repr(translation)
    assert f"{len(best.output_pieces)} output piece" in repr(best)
    alignment = model.align(SENTENCE, TARGET)
    short(repr(alignment))
    first = ", ".join(str(link) for link in sorted(alignment.links[0])[:8])
    assert f"links[0]=[{first}, ... {len(alignment.links[0])} links]" in repr(alignment)
    assert f"soft[0] {len(TARGET.split())}x{len(SENTENCE.split())}" in repr(alignment)
    short(repr(model.score(SENTENCE, TARGET)))
    short(repr(model.trained))
    assert "payload: format, version, config, tokenizers, model" in repr(model.trained)
    short(repr(model.explain(SOURCE, beam=2)))
    attention = model.attention(SENTENCE)
    short(repr(attention))
    assert f"weights {attention.weights.shape}" in repr(attention)


def test_score_repr_and_train_result_repr() -> None:
    assert repr(PairScore(-12.345678, 11)) == (
        "PairScore(log_prob=-12.3457, tokens=11, mean=-1.1223)"
    )
    assert repr(PairScore(float("nan"), 0)) == "PairScore(log_prob=nan, tokens=0, mean=nan)"
    metrics = {f"test/metric{index}": index / 3 for index in range(12)}
    result = TrainResult(Path("outputs/2024-01-01/10-00-00"), metrics)
    short(repr(result))
    assert repr(result) == (
        "TrainResult(run_dir='outputs/2024-01-01/10-00-00', metrics={'test/metric0': 0, "
        "'test/metric1': 0.3333, 'test/metric2': 0.6667, 'test/metric3': 1, ... 8 more})"
    )


def test_a_training_checkpoints_repr_names_its_entries_not_their_contents(run: Path) -> None:
    model = attnseq.load(run, "cpu", threads=1)
    described = repr(model.trained)
    short(described)
    assert "step 2" in described and "optimizer" in described and "rng" in described


# ----------------------------------------------------------------------- notebook display
class Elements(HTMLParser):
    """The tags of an HTML fragment with their attributes, and its text outside them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def elements(fragment: str) -> Elements:
    parser = Elements()
    parser.feed(fragment)
    parser.close()
    return parser


@pytest.mark.slow
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_a_translation_shows_its_heatmap_inline(
    family: str, untrained_checkpoints: dict[str, Path]
):
    model = attnseq.load(untrained_checkpoints[family], "cpu", threads=1)
    translation = model.translate(SOURCE, beam=2, attention=True)
    found = elements(translation._repr_html_())
    assert [tag for tag, _ in found.tags] == ["div", "pre", "img"]
    assert "".join(found.text) == repr(translation)
    source = found.tags[2][1]["src"]
    assert source is not None and source.startswith("data:image/png;base64,")
    png = base64.b64decode(source.removeprefix("data:image/png;base64,"))
    assert png == figure_png(attnseq.plot_alignment(translation))  # the figure it draws
    hypothesis = elements(translation.hypotheses[0]._repr_html_())
    assert "".join(hypothesis.text) == repr(translation.hypotheses[0])
    assert hypothesis.tags[2][1]["src"] == source  # the best output's heatmap
    plain = model.translate(SOURCE)
    assert plain._repr_html_() is None and plain.hypotheses[0]._repr_html_() is None
    assert Translation("", [])._repr_html_() is None


@pytest.mark.slow
def test_the_explanation_shows_inline_with_its_styles_kept_to_its_frame(
    untrained_checkpoints: dict[str, Path],
) -> None:
    model = attnseq.load(untrained_checkpoints["transformer"], "cpu", threads=1)
    page = model.explain(SOURCE, beam=2)
    assert isinstance(page, str) and page.startswith("<!DOCTYPE html>") and "<style>" in page
    shown = page._repr_html_()
    found = elements(shown)
    assert [tag for tag, _ in found.tags] == ["iframe"]  # nothing beside the frame
    frame = found.tags[0][1]
    assert frame["srcdoc"] == page  # the whole page, styles and script, inside the frame
    assert frame["sandbox"] == "allow-scripts"  # its own origin: it cannot reach the notebook
    outside = shown.replace(html.escape(page, quote=True), "")
    assert "<style" not in outside and "<script" not in outside and "<link" not in outside
    assert "<style" not in html.unescape(outside)


# ------------------------------------------------------------------------- ids and scores
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_translate_gives_ids_and_scores_as_tensors(
    family: str, untrained_checkpoints: dict[str, Path]
):
    model = attnseq.load(untrained_checkpoints[family], "cpu", threads=1)
    translation = model.translate(SOURCE, beam=4, nbest=3)
    hypotheses = translation.hypotheses
    for hypothesis in hypotheses:
        ids = hypothesis.output_ids
        assert isinstance(ids, torch.Tensor) and ids.dtype == torch.long and ids.ndim == 1
        assert model.tokenizers.tgt.ids_to_pieces(ids) == hypothesis.output_pieces
        assert model.tokenizers.tgt.decode(ids) == hypothesis.text
    padded = translation.output_ids
    longest = max(len(hypothesis.output_ids) for hypothesis in hypotheses)
    assert padded.shape == (3, longest) and padded.dtype == torch.long
    for row, hypothesis in zip(padded, hypotheses, strict=True):
        length = len(hypothesis.output_ids)
        assert torch.equal(row[:length], hypothesis.output_ids)
        assert (row[length:] == model.tokenizers.tgt.pad_id).all()
    assert translation.scores.tolist() == [hypothesis.score for hypothesis in hypotheses]
    assert translation.scores.dtype == torch.float64
    assert Translation("", []).output_ids.shape == (0, 0)
