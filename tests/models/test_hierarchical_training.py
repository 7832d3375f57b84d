"""Hierarchical attention end to end: invalid combinations exit 2 before a run directory exists;
a short training of a hierarchical pointer-generator with coverage on a generated dialogue task
through train, eval --save-attention and visualize-alignment (both levels); the experiment
config composes with the sizes of its flat counterpart."""

import logging
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import tiny_config
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from attnseq.analysis.saved_attention import SavedAttention
from attnseq.cli.app import app
from attnseq.config import CONFIG_DIR
from attnseq.training.run import run_training

runner = CliRunner()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=transformer"], "is RNN-only"),
        (["model.attention.score=none"], "needs a content score"),
        (["model.attention.score=location"], "needs a content score"),
        (["model=rnn_luong", "model.attention.window=local_p"], "needs model.attention.window"),
    ],
)
def test_invalid_combinations_exit_2(tmp_path: Path, overrides, message) -> None:
    run_dir = tmp_path / "run"
    result = runner.invoke(
        app,
        ["train", "model.attention.hierarchy=sentence", *overrides, f"hydra.run.dir={run_dir}"],
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and message in result.output, result.output
    assert not run_dir.exists()


def dialogue_dataset(folder: Path, seed: int = 0) -> None:
    """Dialogues of 2-4 turns; one turn says "i want ITEM", the summary is "PERSON wants ITEM"."""
    rng = random.Random(seed)
    items = ["tea", "cake", "soup", "rice", "milk", "bread", "fish", "jam"]
    filler = ["hello there .", "ok .", "how are you ?", "fine thanks .", "see you ."]
    for split, count in (("train", 240), ("valid", 16), ("test", 16)):
        lines = []
        for _ in range(count):
            turns = [rng.choice(filler) for _ in range(rng.randint(2, 4))]
            key, item = rng.randrange(len(turns)), rng.choice(items)
            turns[key] = f"i want {item} ."
            dialogue = " ".join(f"#Person{t % 2 + 1}#: {text}" for t, text in enumerate(turns))
            lines.append(f"{dialogue}\t#Person{key % 2 + 1}# wants {item}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def hierarchical_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    data = tmp_path_factory.mktemp("dialogues")
    dialogue_dataset(data)
    run_dir = tmp_path_factory.mktemp("hierarchical_run")
    cfg = tiny_config(
        "data.name=dialogues", "data.source=local", "data.task=summarization",
        "data.format=tsv", f"data.root={data}", "data.splits.train=train.tsv",
        "data.splits.valid=valid.tsv", "data.splits.test=test.tsv", "data.tokenizer=word",
        "data.max_tokens=600", "model.attention.hierarchy=sentence", "model.copy=true",
        "model.coverage=true", "optim.coverage_lambda=0.5", "optim.lr=0.01",
        "trainer.max_steps=40", "trainer.validate_every=20", "trainer.max_epochs=100",
        "trainer.early_stopping_metric=rouge_l",
    )  # fmt: skip
    logging.disable(logging.INFO)
    try:
        metrics = run_training(cfg, run_dir)
    finally:
        logging.disable(logging.NOTSET)
    return run_dir, metrics, data


def test_a_short_training_runs_and_learns(hierarchical_run) -> None:
    run_dir, metrics, _ = hierarchical_run
    assert (run_dir / "checkpoints" / "best.pt").is_file()
    # "PERSON wants ITEM" needs the right turn and its item: copied from the source
    assert metrics["test/rouge_l"] >= 80.0, metrics
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"images": 0})
    images = events.Reload().Tags()["images"]
    assert {"attention/example_0", "attention/example_0/segments"} <= set(images), images


def test_saved_attention_and_figures_have_both_levels(hierarchical_run, tmp_path: Path) -> None:
    run_dir, _, data = hierarchical_run
    checkpoint = run_dir / "checkpoints" / "best.pt"
    out = tmp_path / "eval"
    args = [str(checkpoint), "--save-attention", "--out", str(out), f"data.root={data}"]
    result = runner.invoke(app, ["eval", *args])
    assert result.exit_code == 0, result.output
    saved_file = next(out.rglob("attention.npz"))
    with SavedAttention(saved_file) as saved:
        example = saved.example(0)
    assert example.segments is not None and example.segment_weights is not None
    turns = example.src_text.count("#Person")
    assert max(example.segments) + 1 == turns
    assert example.segment_weights.shape == (example.weights.shape[-2], turns)
    np.testing.assert_allclose(example.segment_weights.sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(example.weights.sum(-1), 1.0, rtol=1e-5)
    for kind in ("segment", "cross"):
        figure = tmp_path / f"{kind}.png"
        args = ["--from-saved", str(saved_file), "--index", "0", "--kind", kind]
        result = runner.invoke(app, ["visualize-alignment", *args, "--out", str(figure)])
        assert result.exit_code == 0, result.output
        assert figure.is_file()
    # from the checkpoint: the same segment map as the saved one for the same output
    from attnseq.analysis.alignment_view import AlignmentViewer

    viewer = AlignmentViewer(checkpoint)
    attention = viewer.attention(example.src_text, kind="segment")
    assert attention.columns[0].startswith("1: #Person1#:")
    if attention.output == example.hyp_text:
        np.testing.assert_allclose(attention.weights, example.segment_weights, atol=1e-5)


def test_kind_segment_of_a_flat_model_is_a_user_error(tmp_path: Path) -> None:
    from helpers import untrained_checkpoint

    checkpoint = untrained_checkpoint(tmp_path / "flat.pt", "data.tokenizer=word",
                                      pairs=[("a b", "b a")])  # fmt: skip
    result = runner.invoke(
        app, ["visualize-alignment", str(checkpoint), "--src", "a b", "--kind", "segment"]
    )
    assert result.exit_code == 2 and "model.attention.hierarchy=sentence" in result.output


def test_the_experiment_matches_its_flat_counterpart() -> None:
    folder = Path(CONFIG_DIR) / "experiment"
    flat = OmegaConf.load(folder / "dialogsum_rnn_attention.yaml")
    hierarchical = OmegaConf.load(folder / "dialogsum_hierarchical.yaml")
    assert hierarchical.model.attention.hierarchy == "sentence"
    for key in ("data", "optim", "trainer"):
        assert hierarchical[key] == flat[key], key
    for key in ("emb_dim", "hidden", "dropout"):
        assert hierarchical.model[key] == flat.model[key], key
    assert hierarchical.model.attention.attn_dim == flat.model.attention.attn_dim
