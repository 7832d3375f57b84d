"""`attnseq.load` and `Model`: the same results as the library code the commands run, the
documented attention shapes and attributes, the warning for text the model cannot read, and
`Model.save`, whose checkpoint `attnseq.load` and the commands read."""

import dataclasses
import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers import eval_result
from typer.testing import CliRunner

import attnseq
from attnseq.alignment.forced import AlignmentMethod, align_sentences
from attnseq.api.model import Model
from attnseq.api.results import TranslatedHypothesis, Translation
from attnseq.cli.app import app
from attnseq.config.conversion import config_to_dict
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.tokenizers import TokenizerPair
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint
from attnseq.models.head_mask import compact_heads
from attnseq.models.loading import load_trained_model

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCES = ["June 5, 2001", "the 3rd of March 1998"]
SOURCE = SOURCES[0]


def test_load_takes_a_file_or_a_run_directory(
    untrained_checkpoints: dict[str, Path], tmp_path: Path
):
    run = untrained_checkpoints["rnn"].parents[1]
    model = attnseq.load(run, "cpu", threads=1)
    assert isinstance(model, Model) and model.path == untrained_checkpoints["rnn"]
    assert attnseq.load(untrained_checkpoints["rnn"], "cpu").path == untrained_checkpoints["rnn"]
    with pytest.raises(attnseq.UserError, match="checkpoints/best.pt"):
        attnseq.load(tmp_path, "cpu")
    with pytest.raises(attnseq.UserError):
        attnseq.load(tmp_path / "missing.pt", "cpu")


def test_translate_gives_what_the_command_writes(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["rnn"], "cpu", threads=1)
    settings = model.settings(beam=3)
    expected = list(model.translator.translate([*SOURCES, ""], settings))
    results = model.translate([*SOURCES, ""], beam=3)
    assert [result.text for result in results] == expected
    assert results[2] == Translation("", [])
    single = model.translate(SOURCES[0], beam=3)
    assert isinstance(single, Translation) and single.text == expected[0]


def test_nbest_scores_and_sampling(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["rnn"], "cpu", threads=1)
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
def test_attention_has_the_documented_shape(
    family: str, untrained_checkpoints: dict[str, Path]
) -> None:
    model = attnseq.load(untrained_checkpoints[family], "cpu", threads=1)
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


def test_score_is_the_scorers(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["rnn"], "cpu", threads=1)
    targets = ["2001-06-05", "1998-03-03"]
    scorer = attnseq.load(untrained_checkpoints["rnn"], "cpu").scorer  # loaded apart
    expected = scorer.score(list(zip(SOURCES, targets, strict=True)))
    assert model.score(SOURCES, targets) == expected  # the same batch: the same numbers
    alone = model.score(SOURCES[0], targets[0])  # a batch of one
    assert alone.tokens == expected[0].tokens
    assert alone.log_prob == pytest.approx(expected[0].log_prob, rel=BATCHING_TOLERANCE)
    with pytest.raises(attnseq.UserError, match="2 sources but 1 targets"):
        model.score(SOURCES, targets[:1])


def test_align_is_align_sentences(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(untrained_checkpoints["transformer"], "cpu", threads=1)
    src, tgt = ["June 5 , 2001"], ["2001 - 06 - 05"]
    result = model.align(src, tgt, method="shift-att", layer=2, head=1)
    trained = load_trained_model(untrained_checkpoints["transformer"])
    expected = align_sentences(trained, src, tgt, AlignmentMethod("shift-att", 2, 1))
    assert result.links == expected.links
    with pytest.raises(attnseq.UserError, match="^layer must be in 1..2"):
        model.align(src, tgt, layer=3)


@pytest.mark.slow
def test_the_translate_command_uses_the_api(untrained_checkpoints: dict[str, Path], tmp_path: Path):
    text = tmp_path / "in.txt"
    text.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    arguments = [
        "translate",
        str(untrained_checkpoints["transformer"]),
        "-i",
        str(text),
        "--beam",
        "2",
    ]
    result = CliRunner().invoke(app, [*arguments, "--threads", "1", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    model = attnseq.load(untrained_checkpoints["transformer"], "cpu", threads=1)
    expected = [translation.text for translation in model.translate(SOURCES, beam=2)]
    assert result.stdout.splitlines() == expected


@pytest.mark.slow
def test_explain_returns_the_page_it_writes(untrained_checkpoints: dict[str, Path], tmp_path: Path):
    from attnseq.analysis.explain_page import explanation_html
    from attnseq.analysis.explanation import explain

    model = attnseq.load(untrained_checkpoints["transformer"], "cpu")
    path = tmp_path / "page.html"
    page = model.explain(SOURCES[0], "2001-06-05", path=path)
    assert path.read_text(encoding="utf-8") == page
    expected = explain(model.trained, SOURCES[0], "2001-06-05", checkpoint=str(model.path))
    assert page == explanation_html(expected)
    assert model.explain(SOURCES[0], beam=2).startswith("<!DOCTYPE html>")
    with pytest.raises(attnseq.UserError, match="unknown format '.png'"):
        model.explain(SOURCES[0], path=tmp_path / "page.png")


def test_the_documented_attributes(untrained_checkpoints: dict[str, Path]) -> None:
    model = attnseq.load(
        untrained_checkpoints["rnn"], "cpu", threads=1, overrides=["decoding.beam=3"]
    )
    assert isinstance(model.config, TrainConfig) and model.config is model.trained.cfg
    assert isinstance(model.decoding, DecodingConfig) and model.decoding.beam == 3
    assert model.settings() == model.decoding  # what a call without changes decodes with
    assert isinstance(model.tokenizers, TokenizerPair)
    assert isinstance(model.module, torch.nn.Module) and not model.module.training
    assert model.device == torch.device("cpu")
    assert next(model.module.parameters()).device == model.device


def test_translate_warns_once_naming_what_the_model_cannot_read(
    untrained_checkpoints: dict[str, Path],
) -> None:
    model = attnseq.load(untrained_checkpoints["rnn"], "cpu", threads=1)
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
    family: str, untrained_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    model = attnseq.load(
        untrained_checkpoints[family], "cpu", threads=1, overrides=["decoding.beam=2"]
    )
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_saving_over_its_own_checkpoint_only_when_nothing_is_lost(
    run: Path, untrained_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    training = run / "checkpoints" / "last.pt"
    before = training.read_bytes()
    model = attnseq.load(training, "cpu", threads=1)
    with pytest.raises(
        attnseq.UserError, match="holds the state of a training run \\(optimizer, scheduler"
    ):
        model.save(training)
    link = tmp_path / "link.pt"
    link.symlink_to(training)
    with pytest.raises(attnseq.UserError, match="save to another path"):
        model.save(link)
    assert training.read_bytes() == before
    plain = tmp_path / "plain.pt"  # no training state: an untrained model's file
    plain.write_bytes(untrained_checkpoints["rnn"].read_bytes())
    model = attnseq.load(plain, "cpu", threads=1)
    model.save(plain)
    same_translations(model, attnseq.load(plain, "cpu", threads=1), [SOURCE])


def test_save_never_writes_over_a_training_state_by_any_name(run: Path, tmp_path: Path) -> None:
    """The state of a run (its last.pt, best.pt) is refused by its content: saving the model
    of best.pt over last.pt, or over a copy or hard link of it under another name, loses
    nothing. A file named like a checkpoint that holds no state is replaced."""
    folder = run / "checkpoints"
    model = attnseq.load(folder / "best.pt", "cpu", threads=1)
    renamed = tmp_path / "model.pt"
    renamed.write_bytes((folder / "last.pt").read_bytes())
    os.link(folder / "last.pt", tmp_path / "hard.pt")
    before = {path: path.read_bytes() for path in (folder / "last.pt", renamed)}
    for target in (folder / "last.pt", renamed, tmp_path / "hard.pt"):
        with pytest.raises(attnseq.UserError, match=f"^path {target} holds the state of a"):
            model.save(target)
    assert {path: path.read_bytes() for path in before} == before
    saved = model.save(tmp_path / "saved.pt")
    model.save(saved)  # a saved model holds no state: replaced
    assert not {"optimizer", "rng"} & load_checkpoint(saved).keys()


def test_a_path_the_file_system_cannot_take_is_one_user_error(
    models: dict[str, Model], tmp_path: Path
) -> None:
    model = models["rnn"]
    for path in (tmp_path / ("x" * 300 + ".pt"), tmp_path / ("d" * 300) / "model.pt"):
        with pytest.raises(attnseq.UserError, match="File name too long"):
            model.save(path)
    with pytest.raises(attnseq.UserError, match="File name too long"):
        model.explain(SOURCE, "2001-06-05", methods=["attention"], path="p" * 300 + ".html")
    assert os.listdir(tmp_path) == []


def test_load_says_what_a_path_that_is_no_checkpoint_file_is(tmp_path: Path) -> None:
    with pytest.raises(attnseq.UserError, match="^/dev/null is a character device, not a check"):
        attnseq.load("/dev/null")
    os.mkfifo(tmp_path / "pipe.pt")
    with pytest.raises(attnseq.UserError, match="pipe.pt is a named pipe \\(FIFO\\), not a"):
        attnseq.load(tmp_path / "pipe.pt")
    with pytest.raises(attnseq.UserError, match="^checkpoint not found: "):
        attnseq.load(tmp_path / "missing.pt")


def test_a_failed_save_leaves_the_old_file(
    untrained_checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "model.pt"
    target.write_bytes(untrained_checkpoints["rnn"].read_bytes())
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


@pytest.mark.slow
def test_save_keeps_head_masks_and_the_pruning_record(
    untrained_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    pruned = tmp_path / "pruned.pt"
    payload = load_checkpoint(untrained_checkpoints["transformer"])
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


@pytest.mark.slow
def test_save_refuses_what_it_cannot_write_whole(
    untrained_checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    path = untrained_checkpoints["transformer"]
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
