"""The Python API (`attnseq.load`, `Model`, `plot_alignment`): the same results as the library
code the commands run, the documented attention shapes, and a cheap `import attnseq`."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure
from typer.testing import CliRunner

import attnseq
from attnseq.alignment.forced import AlignmentMethod, align_sentences
from attnseq.api.model import Model
from attnseq.api.results import TranslatedHypothesis, Translation
from attnseq.cli.app import app
from attnseq.evaluation.scoring import Scorer
from attnseq.models.loading import load_trained_model

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCES = ["June 5, 2001", "the 3rd of March 1998"]


def test_importing_attnseq_imports_neither_torch_nor_hydra() -> None:
    code = (
        "import sys, attnseq; heavy = ('torch', 'hydra', 'omegaconf', 'typer', 'matplotlib'); "
        "print([name for name in heavy if name in sys.modules]); print(attnseq.__all__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded, names = result.stdout.splitlines()
    assert loaded == "[]"
    assert {"load", "train", "plot_alignment", "Model"} <= set(eval(names))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        attnseq.nonexistent  # noqa: B018


def test_load_takes_a_file_or_a_run_directory(checkpoints: dict[str, Path], tmp_path: Path):
    run = checkpoints["rnn"].parents[1]
    model = attnseq.load(run, "cpu", threads=1)
    assert isinstance(model, Model) and model.path == checkpoints["rnn"]
    assert attnseq.load(checkpoints["rnn"], "cpu").path == checkpoints["rnn"]
    with pytest.raises(attnseq.UserError, match="checkpoints/best.pt"):
        attnseq.load(tmp_path, "cpu")
    with pytest.raises(attnseq.UserError):
        attnseq.load(tmp_path / "missing.pt", "cpu")


def test_translate_gives_what_the_command_writes(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["rnn"], "cpu", threads=1)
    settings = model.settings(beam=3)
    expected = list(model.translator.translate([*SOURCES, ""], settings))
    results = model.translate([*SOURCES, ""], beam=3)
    assert [result.text for result in results] == expected
    assert results[2] == Translation("", [])
    single = model.translate(SOURCES[0], beam=3)
    assert isinstance(single, Translation) and single.text == expected[0]


def test_nbest_scores_and_sampling(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["rnn"], "cpu", threads=1)
    hypotheses = model.translate(SOURCES[0], beam=4, nbest=3).hypotheses
    assert len(hypotheses) == 3
    assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
    samples = model.translate(SOURCES[0], sample=True, num_samples=4, seed=3).hypotheses
    again = model.translate(SOURCES[0], sample=True, num_samples=4, seed=3).hypotheses
    assert len(samples) == 4 and [s.text for s in samples] == [s.text for s in again]
    assert model.settings(sample=True, top_k=2) == dataclasses.replace(
        model.config.decoding, sample=True, top_k=2, beam=1, nbest=1
    )
    with pytest.raises(attnseq.UserError, match="sample draws the outputs and beam 3 searches"):
        model.translate(SOURCES[0], beam=3, sample=True)
    with pytest.raises(attnseq.UserError, match="nbest=3 is more than beam=2"):
        model.translate(SOURCES[0], beam=2, nbest=3)
    with pytest.raises(attnseq.UserError, match="^temperature: sampling options, they go with"):
        model.translate(SOURCES[0], temperature=0.5)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_attention_has_the_documented_shape(family: str, checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints[family], "cpu", threads=1)
    hypothesis = model.translate(SOURCES[0], beam=2, attention=True).hypotheses[0]
    assert isinstance(hypothesis, TranslatedHypothesis)
    source_length = len(hypothesis.source_pieces)
    assert len(model.tokenizers.src.encode(SOURCES[0])) == source_length
    output_length = len(hypothesis.output_pieces)
    shape = tuple(hypothesis.attention.shape)  # (T, S) or (L, H, T, S)
    assert shape[:-2] == (() if family == "rnn" else (2, 2))
    assert shape[-1] == source_length
    assert shape[-2] in (output_length, output_length + 1)  # + </s> when it was produced
    torch.testing.assert_close(hypothesis.attention.sum(-1), torch.ones(shape[:-1]))
    assert model.translate(SOURCES[0]).hypotheses[0].attention is None


# One pair scored alone and in a batch of two runs float32 reductions over differently padded
# tensors, in an order that may depend on the thread count: a sum of n terms may differ by up to
# ~n * 2**-24 relative to the sum of their magnitudes (float32's rounding), here a few 1e-7.
BATCHING_TOLERANCE = 1e-5  # relative, on a log-probability


def test_score_is_the_scorers(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["rnn"], "cpu", threads=1)
    targets = ["2001-06-05", "1998-03-03"]
    scorer = Scorer.from_checkpoint(checkpoints["rnn"], "cpu")
    expected = scorer.score(list(zip(SOURCES, targets, strict=True)))
    assert model.score(SOURCES, targets) == expected  # the same batch: the same numbers
    alone = model.score(SOURCES[0], targets[0])  # a batch of one
    assert alone.tokens == expected[0].tokens
    assert alone.log_prob == pytest.approx(expected[0].log_prob, rel=BATCHING_TOLERANCE)
    with pytest.raises(attnseq.UserError, match="2 sources but 1 targets"):
        model.score(SOURCES, targets[:1])


def test_align_is_align_sentences(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["transformer"], "cpu", threads=1)
    src, tgt = ["June 5 , 2001"], ["2001 - 06 - 05"]
    result = model.align(src, tgt, method="shift-att", layer=2, head=1)
    trained = load_trained_model(checkpoints["transformer"])
    expected = align_sentences(trained, src, tgt, AlignmentMethod("shift-att", 2, 1))
    assert result.links == expected.links
    with pytest.raises(attnseq.UserError, match="^layer must be in 1..2"):
        model.align(src, tgt, layer=3)


def test_plot_alignment_returns_a_figure(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["transformer"], "cpu", threads=1)
    hypothesis = model.translate(SOURCES[0], attention=True).hypotheses[0]
    figure = attnseq.plot_alignment(hypothesis, layer=2, head=2)
    assert isinstance(figure, Figure)
    assert "(layer 2, head 2)" in " ".join(figure.axes[0].get_title().split())
    grid = attnseq.plot_alignment(model.attention(SOURCES[0]), all_heads=True)
    assert len([axis for axis in grid.axes if axis.images]) == 4  # 2 layers x 2 heads
    with pytest.raises(attnseq.UserError, match="^head must be in 1..2"):
        attnseq.plot_alignment(hypothesis, head=3)
    without = model.translate(SOURCES[0]).hypotheses[0]
    with pytest.raises(attnseq.UserError, match="attention=True"):
        attnseq.plot_alignment(without)


def test_the_translate_command_uses_the_api(checkpoints: dict[str, Path], tmp_path: Path):
    text = tmp_path / "in.txt"
    text.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    arguments = ["translate", str(checkpoints["transformer"]), "-i", str(text), "--beam", "2"]
    result = CliRunner().invoke(app, [*arguments, "--threads", "1", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    model = attnseq.load(checkpoints["transformer"], "cpu", threads=1)
    expected = [translation.text for translation in model.translate(SOURCES, beam=2)]
    assert result.stdout.splitlines() == expected


def test_explain_returns_the_page_it_writes(checkpoints: dict[str, Path], tmp_path: Path):
    from attnseq.analysis.explain_page import explanation_html
    from attnseq.analysis.explanation import explain

    model = attnseq.load(checkpoints["transformer"], "cpu")
    path = tmp_path / "page.html"
    page = model.explain(SOURCES[0], "2001-06-05", path=path)
    assert path.read_text(encoding="utf-8") == page
    expected = explain(model.trained, SOURCES[0], "2001-06-05", checkpoint=str(model.path))
    assert page == explanation_html(expected)
    assert model.explain(SOURCES[0], beam=2).startswith("<!DOCTYPE html>")
    with pytest.raises(attnseq.UserError, match="unknown format '.png'"):
        model.explain(SOURCES[0], path=tmp_path / "page.png")
