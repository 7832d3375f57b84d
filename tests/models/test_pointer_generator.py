"""Pointer-generator end to end: a word the target vocabulary lacks is produced and written as the
source has it (hand-set model through `attnseq translate`, and a trained model through train,
eval and metrics.json); p_gen reaches TensorBoard and the heatmaps; config mistakes exit 2; the
summarization experiments compare models of the same size."""

import json
import logging
import random
from pathlib import Path

import pytest
import torch
from helpers import (
    SOURCE_ONLY,
    WORD_PAIRS,
    copy_only_checkpoint,
    tiny_config,
    untrained_checkpoint,
)
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from attnseq.analysis.saved_attention import SavedAttention
from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.config.conversion import config_to_dict
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.run import run_training

runner = CliRunner()


def test_a_source_only_word_is_produced_and_written_as_the_source_has_it(tmp_path: Path) -> None:
    checkpoint = copy_only_checkpoint(tmp_path / "copy.pt")
    translator = Translator.from_checkpoint(checkpoint, "cpu")
    assert translator.tokenizers.tgt.piece_to_id(SOURCE_ONLY) == 1  # <unk> in the target
    # one source word gets all the attention; P(copy it) = 0.88 > P(EOS) = 0.12
    greedy = translator.settings(beam=1, max_output_extra=2)
    assert list(translator.translate([SOURCE_ONLY], greedy)) == [
        f"{SOURCE_ONLY} " * 2 + SOURCE_ONLY
    ]
    # blocking repeated unigrams leaves EOS as the next best: the output is the word once
    blocked = translator.settings(beam=3, no_repeat_ngram=1)
    assert list(translator.translate([SOURCE_ONLY, ""], blocked)) == [SOURCE_ONLY, ""]
    result = runner.invoke(
        app, ["translate", str(checkpoint), "--beam", "2", "--no-repeat-ngram", "1"],
        input=f"{SOURCE_ONLY}\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{SOURCE_ONLY}\n"


def test_plain_model_cannot_produce_the_word(tmp_path: Path) -> None:
    checkpoint = untrained_checkpoint(
        tmp_path / "plain.pt", "data.tokenizer=word", pairs=WORD_PAIRS
    )
    translator = Translator.from_checkpoint(checkpoint, "cpu")
    outputs = list(translator.translate([SOURCE_ONLY], translator.settings(beam=2)))
    assert SOURCE_ONLY not in outputs[0]


def test_visualize_alignment_shows_p_gen_and_the_source_text(tmp_path: Path) -> None:
    from attnseq.analysis.alignment_view import AlignmentViewer, draw

    checkpoint = copy_only_checkpoint(tmp_path / "copy.pt")
    viewer = AlignmentViewer(checkpoint)
    attention = viewer.attention(f"alpha {SOURCE_ONLY}", tgt=f"{SOURCE_ONLY} beta")
    assert attention.columns == ["alpha", SOURCE_ONLY]
    assert attention.rows == [SOURCE_ONLY, "beta", "</s>"]
    assert attention.p_gen is not None and attention.p_gen.shape == (3,)
    torch.testing.assert_close(
        torch.from_numpy(attention.p_gen),
        torch.full((3,), float(torch.sigmoid(torch.tensor(-2.0)))),
    )
    figure = draw(attention)
    assert len(figure.axes) == 3  # heatmap, its colour bar, the p_gen strip
    out = tmp_path / "a.png"
    result = runner.invoke(
        app, ["visualize-alignment", str(checkpoint), "--src", SOURCE_ONLY, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.is_file()


# ------------------------------------------------------------------- a trained copy model
def names_dataset(folder: Path, seed: int = 0) -> None:
    """ "please call NAME at NUMBER" -> "call NAME": test names and numbers never occur in
    training, so only copying can produce them."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))

    names = list({word() for _ in range(400)})
    splits = {"train": names[:300], "valid": names[300:320], "test": names[320:360]}
    for split, chosen in splits.items():
        lines = []
        for name in chosen * (3 if split == "train" else 1):
            polite = rng.choice(["please", "kindly", "now"])
            number = rng.randrange(100, 999) if split == "train" else rng.randrange(1000, 9999)
            lines.append(f"{polite} call {name} at {number}\tcall {name}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def trained_copy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    data = tmp_path_factory.mktemp("names")
    names_dataset(data)
    run_dir = tmp_path_factory.mktemp("copy_run")
    cfg = tiny_config(
        "data.name=names", "data.source=local", "data.task=summarization", "data.format=tsv",
        f"data.root={data}", "data.splits.train=train.tsv", "data.splits.valid=valid.tsv",
        "data.splits.test=test.tsv", "data.tokenizer=word", "data.max_tokens=400",
        "model.copy=true", "model.coverage=true", "optim.coverage_lambda=0.5",
        "optim.coverage_start_step=100", "optim.lr=0.01", "model.dropout=0.0",
        "trainer.max_steps=180", "trainer.validate_every=90", "trainer.max_epochs=100",
        "trainer.early_stopping_metric=exact_match", "trainer.early_stopping_patience=0",
    )  # fmt: skip
    logging.disable(logging.INFO)
    try:
        metrics = run_training(cfg, run_dir)
    finally:
        logging.disable(logging.NOTSET)
    return run_dir, metrics, data


def test_trained_copy_model_copies_unseen_names(trained_copy_run) -> None:
    run_dir, metrics, data = trained_copy_run
    references = [line.split("\t")[1] for line in (data / "test.tsv").read_text().splitlines()]
    hypotheses = (run_dir / "hyps" / "test.txt").read_text().splitlines()
    assert metrics["test/exact_match"] >= 0.9, hypotheses[:5]
    assert sum(h == r for h, r in zip(hypotheses, references, strict=True)) >= 36
    assert 0.0 <= metrics["test/p_gen_mean"] < 0.9  # the names are copied
    stored = json.loads((run_dir / "metrics.json").read_text())
    for key in ["test/repeated_trigrams", "test/coverage_loss", "test/rouge2", "test/rouge_l"]:
        assert key in stored
    # eval of the checkpoint reproduces the test metrics (extended vocabulary included), and
    # the saved attention names the copied words as the source has them
    out = run_dir / "eval"
    again = evaluate_checkpoint(
        run_dir / "checkpoints" / "best.pt",
        device_name="cpu",
        out_dir=out,
        save_attention=True,
        overrides=[f"data.root={data}"],  # a checkpoint's own data.root needs the user's word
    )
    assert again["test/exact_match"] == pytest.approx(metrics["test/exact_match"])
    assert again["test/p_gen_mean"] == pytest.approx(metrics["test/p_gen_mean"], abs=1e-6)
    with SavedAttention(again.result.folder / "attention.npz") as saved:
        example = saved.example(0)
    name = references[0].split()[1]
    if example.hyp_text == references[0]:
        assert example.hyp_tokens[:2] == ["call", name] and name in example.src_tokens


def test_p_gen_reaches_tensorboard(trained_copy_run) -> None:
    run_dir, _, _ = trained_copy_run
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert {"valid/p_gen_mean", "valid/coverage_loss"} <= set(events.Tags()["scalars"])
    values = [event.value for event in events.Scalars("valid/p_gen_mean")]
    # one value per validation (every 90 updates; the run may stop early at exact match 1.0)
    steps = load_checkpoint(run_dir / "checkpoints" / "last.pt")["progress"]["step"]
    assert len(values) == steps // 90 and all(0.0 <= value <= 1.0 for value in values)
    assert "attention/example_0" in events.Tags()["images"]


def test_translate_copies_a_new_name(trained_copy_run) -> None:
    run_dir, _, _ = trained_copy_run
    result = runner.invoke(
        app, ["translate", str(run_dir / "checkpoints" / "best.pt"), "--beam", "3"],
        input="please call Xavierine at 12345\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout == "call Xavierine\n"


# ------------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.copy=true", "model.attention.score=none"], "model.copy=true needs attention"),
        (["model.coverage=true", "model.attention.score=general"], "additive or concat"),
        (["model.copy=true", "model.attention.window=local_p"], "window=global"),
        (["optim.coverage_lambda=1.0"], "needs model.coverage=true"),
        (["model.family=transformer", "model.copy=true", "model.copy_layer=5"], "copy_layer"),
        (["trainer.coverage_penalty=-1"], "coverage_penalty"),
        (["trainer.no_repeat_ngram=-2"], "no_repeat_ngram"),
    ],
)
def test_invalid_combinations_are_user_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        tiny_config(*overrides)


def test_config_error_exits_2_with_one_message() -> None:
    result = runner.invoke(app, ["train", "model.copy=true", "model.attention.score=none"])
    assert result.exit_code == 2
    assert "model.copy=true needs attention" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("dataset", ["dialogsum", "aeslc"])
def test_pointer_generator_and_attention_baseline_have_the_same_size_and_budget(
    dataset: str,
) -> None:
    """The two experiments differ only in copy, coverage and the coverage loss schedule."""

    def flat(name: str) -> dict[str, object]:
        values = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "experiment" / f"{name}.yaml"))
        out: dict[str, object] = {}

        def walk(prefix: str, node: object) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    walk(f"{prefix}{key}.", value)
            else:
                out[prefix.rstrip(".")] = node

        walk("", values)
        return out

    pointer, plain = flat(f"{dataset}_pointer_generator"), flat(f"{dataset}_rnn_attention")
    differing = {key for key in pointer.keys() | plain.keys() if pointer.get(key) != plain.get(key)}
    assert differing == {
        "name",
        "model.copy",
        "model.coverage",
        "optim.coverage_lambda",
        "optim.coverage_start_step",
    }
    assert pointer["model.copy"] and pointer["model.coverage"]
    assert config_to_dict(tiny_config())["model"]["copy"] is False  # off unless asked for
