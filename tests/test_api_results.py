"""What the Python API's results look like in a notebook and how a model is saved: one-line
reprs (never a tensor dump), a translation's heatmap and the explanation's page inline,
`plot_alignment` of every result, ids and scores as tensors, the warning for text the model
cannot read, and `Model.save`, whose checkpoint `attnseq.load` and the commands read."""

import base64
import html
import json
import os
import warnings
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import eval_result
from typer.testing import CliRunner

import attnseq
from attnseq.analysis.figures import figure_png
from attnseq.api.model import Model
from attnseq.api.results import Translation
from attnseq.api.train import TrainResult
from attnseq.cli.app import app
from attnseq.config.conversion import config_to_dict
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.tokenizers import TokenizerPair
from attnseq.evaluation.scoring import PairScore
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models.head_mask import compact_heads

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

# a 50-word sentence, each word one the generated date task's characters spell
SENTENCE = " ".join(["June", "5", ",", "2001"] * 12 + ["May", "1"])
TARGET = " ".join(["2001", "-", "06", "-", "05"] * 10)
REPR_LIMIT = 300  # characters
SOURCE = "June 5, 2001"


@pytest.fixture
def run(trained_rnn_checkpoint: Path) -> Path:
    """The run directory of conftest's trained_rnn_checkpoint (two updates): its checkpoints
    hold the state of training (optimizer, ...)."""
    return trained_rnn_checkpoint.parents[1]


def short(text: str) -> None:
    """A repr a notebook can show: one line, under REPR_LIMIT characters, no tensor dump."""
    assert "\n" not in text and len(text) < REPR_LIMIT, (len(text), text)
    assert "tensor(" not in text and "array(" not in text, text


# ------------------------------------------------------------------------------------ reprs
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_every_result_has_a_short_repr(family: str, checkpoints: dict[str, Path]) -> None:
    assert len(SENTENCE.split()) == 50 and len(TARGET.split()) == 50
    model = attnseq.load(checkpoints[family], "cpu", threads=1)
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


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_a_translation_shows_its_heatmap_inline(family: str, checkpoints: dict[str, Path]):
    model = attnseq.load(checkpoints[family], "cpu", threads=1)
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


def test_the_explanation_shows_inline_with_its_styles_kept_to_its_frame(
    checkpoints: dict[str, Path],
) -> None:
    model = attnseq.load(checkpoints["transformer"], "cpu", threads=1)
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


# ------------------------------------------------------------------------- plot_alignment
def heatmap(figure) -> np.ndarray:
    return np.asarray(figure.axes[0].images[0].get_array())


def tick_labels(figure, axis: str) -> list[str]:
    ticks = figure.axes[0].get_xticklabels() if axis == "x" else figure.axes[0].get_yticklabels()
    return [label.get_text() for label in ticks]


def test_plot_alignment_draws_every_result(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["transformer"], "cpu", threads=1)
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


def test_plot_alignment_says_what_it_takes(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["rnn"], "cpu", threads=1)
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


# ------------------------------------------------------------------ ids, scores, attributes
@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_translate_gives_ids_and_scores_as_tensors(family: str, checkpoints: dict[str, Path]):
    model = attnseq.load(checkpoints[family], "cpu", threads=1)
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


def test_the_documented_attributes(checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(checkpoints["rnn"], "cpu", threads=1, overrides=["decoding.beam=3"])
    assert isinstance(model.config, TrainConfig) and model.config is model.trained.cfg
    assert isinstance(model.decoding, DecodingConfig) and model.decoding.beam == 3
    assert model.settings() == model.decoding  # what a call without changes decodes with
    assert isinstance(model.tokenizers, TokenizerPair)
    assert isinstance(model.module, torch.nn.Module) and not model.module.training
    assert model.device == torch.device("cpu")
    assert next(model.module.parameters()).device == model.device


def test_translate_warns_once_naming_what_the_model_cannot_read(
    checkpoints: dict[str, Path],
) -> None:
    model = attnseq.load(checkpoints["rnn"], "cpu", threads=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.translate(["日本 ☃ 5", "5 ☃"])
    assert len(caught) == 1 and caught[0].category is UserWarning
    message = str(caught[0].message)
    assert message.startswith("44.4% of the source tokens (4 of 9) are unknown to the model's")
    assert message.endswith("'日', '本', '☃'")  # each once, in order
    assert caught[0].filename == __file__  # it points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # text the vocabulary reads: no warning
        model.translate([SOURCE, ""])


# -------------------------------------------------------------------------------- save
def same_translations(first: Model, second: Model, lines: list[str]) -> None:
    """Bitwise the same outputs, scores, ids and attention."""
    ours = first.translate(lines, beam=3, nbest=2, attention=True)
    theirs = second.translate(lines, beam=3, nbest=2, attention=True)
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.source == other.source
        assert torch.equal(mine.output_ids, other.output_ids)
        for a, b in zip(
            mine.hypotheses,
            other.hypotheses,
            strict=True,
        ):
            assert replace(a, attention=None) == replace(b, attention=None)  # text, scores, ...
            assert torch.equal(a.attention, b.attention)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_save_and_load_give_the_same_model(
    family: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    model = attnseq.load(checkpoints[family], "cpu", threads=1, overrides=["decoding.beam=2"])
    saved = model.save(tmp_path / "saved.pt")
    assert saved == tmp_path / "saved.pt"
    again = attnseq.load(saved, "cpu", threads=1)
    for (name, tensor), (other, value) in zip(
        model.module.state_dict().items(), again.module.state_dict().items(), strict=True
    ):
        assert name == other and torch.equal(tensor, value)
    assert again.config == model.config and again.decoding.beam == 2
    lines = [SOURCE, "the 3rd of March 1998"]
    same_translations(model, again, lines)
    targets = ["2001-06-05", "1998-03-03"]
    assert again.score(lines, targets) == model.score(lines, targets)  # bitwise
    payload = load_checkpoint(saved)
    assert payload["config"] == config_to_dict(model.config)
    assert payload["tokenizers"] == model.tokenizers.state()
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_a_saved_training_checkpoint_is_read_by_every_command(run: Path, tmp_path: Path):
    model = attnseq.load(run, "cpu", threads=1)
    original = run / "checkpoints" / "best.pt"
    assert "optimizer" in model.trained.payload
    saved = model.save(tmp_path / "model.pt")
    payload = load_checkpoint(saved)
    assert not {"optimizer", "scheduler", "progress", "rng"} & set(payload)  # a model to use
    runner = CliRunner()
    metrics = []
    for checkpoint, out in ((original, tmp_path / "a"), (saved, tmp_path / "b")):
        arguments = [
            "eval",
            str(checkpoint),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--threads",
            "1",
        ]
        result = runner.invoke(app, arguments)
        assert result.exit_code == 0, result.output
        record = json.loads((eval_result(out) / "metrics.json").read_text(encoding="utf-8"))
        metrics.append({key: value for key, value in record.items() if key.startswith("test/")})
    assert metrics[0] == metrics[1] and "test/bleu" in metrics[0]
    text = tmp_path / "in.txt"
    text.write_text(f"{SOURCE}\nthe 3rd of March 1998\n", encoding="utf-8")
    outputs = []
    for checkpoint in (original, saved):
        arguments = ["translate", str(checkpoint), "-i", str(text), "--device", "cpu"]
        result = runner.invoke(app, [*arguments, "--threads", "1"])
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 2
    figure = tmp_path / "a.png"
    arguments = ["visualize-alignment", str(saved), "--src", SOURCE, "--out", str(figure)]
    result = runner.invoke(app, [*arguments, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert figure.read_bytes().startswith(b"\x89PNG")


def test_saving_over_its_own_checkpoint_only_when_nothing_is_lost(
    run: Path, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    training = run / "checkpoints" / "last.pt"
    before = training.read_bytes()
    model = attnseq.load(training, "cpu", threads=1)
    with pytest.raises(attnseq.UserError, match="holds the state of its training \\(optimizer"):
        model.save(training)
    link = tmp_path / "link.pt"
    link.symlink_to(training)
    with pytest.raises(attnseq.UserError, match="save to another path"):
        model.save(link)
    assert training.read_bytes() == before
    plain = tmp_path / "plain.pt"  # no training state: an untrained model's file
    plain.write_bytes(checkpoints["rnn"].read_bytes())
    model = attnseq.load(plain, "cpu", threads=1)
    model.save(plain)
    same_translations(model, attnseq.load(plain, "cpu", threads=1), [SOURCE])


def test_a_failed_save_leaves_the_old_file(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "model.pt"
    target.write_bytes(checkpoints["rnn"].read_bytes())
    before = target.read_bytes()
    model = attnseq.load(target, "cpu", threads=1)

    def fail(payload: object, handle) -> None:
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk unplugged")

    monkeypatch.setattr("attnseq.io.checkpoint.torch.save", fail)
    with pytest.raises(OSError, match="disk unplugged"):
        model.save(target)
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.pt"]


def test_save_keeps_head_masks_and_the_pruning_record(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    pruned = tmp_path / "pruned.pt"
    payload = load_checkpoint(checkpoints["transformer"])
    mask = "decoder_layers.1.cross_attn.head_mask"
    payload["model"][mask] = torch.tensor([1.0, 0.0])
    record = {"source": "t.pt", "by": "random", "count": 1, "heads": [["decoder_cross", 2, 2]]}
    payload["head_pruning"] = record
    save_checkpoint(pruned, {k: v for k, v in payload.items() if k not in ("format", "version")})
    model = attnseq.load(pruned, "cpu", threads=1)
    saved = model.save(tmp_path / "saved.pt")
    written = load_checkpoint(saved)
    assert written["head_pruning"] == record
    assert torch.equal(written["model"][mask], torch.tensor([1.0, 0.0]))
    same_translations(model, attnseq.load(saved, "cpu", threads=1), [SOURCE])
    model.module.get_buffer(mask).fill_(1.0)  # the masks change: the record would be wrong
    written = load_checkpoint(model.save(tmp_path / "unpruned.pt"))
    assert "head_pruning" not in written
    assert torch.equal(written["model"][mask], torch.tensor([1.0, 1.0]))


def test_save_refuses_what_it_cannot_write_whole(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    path = checkpoints["transformer"]
    ensemble = attnseq.load(path, "cpu", threads=1, ensemble=[path])
    with pytest.raises(attnseq.UserError, match="^an ensemble cannot be saved as one checkpoint"):
        ensemble.save(tmp_path / "ensemble.pt")
    model = attnseq.load(path, "cpu", threads=1)
    with pytest.raises(attnseq.UserError, match="is a folder; give a file name"):
        model.save(tmp_path)
    with pytest.raises(attnseq.UserError, match="unknown format '.html'; use one of .pt"):
        model.save(tmp_path / "model.html")
    with pytest.raises(TypeError, match="path must be a str or path"):
        model.save(None)  # type: ignore[arg-type]
    model.module.get_buffer("decoder_layers.1.cross_attn.head_mask").copy_(torch.tensor([1.0, 0]))
    assert compact_heads(model.module) == 1  # the weights no longer fit the config
    with pytest.raises(attnseq.UserError, match="weights do not fit the model its config"):
        model.save(tmp_path / "compacted.pt")
    assert sorted(os.listdir(tmp_path)) == []
