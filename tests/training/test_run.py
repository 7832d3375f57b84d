"""End to end through the composition root: train a tiny model, then check every artefact a run
writes (checkpoints, metrics.json, TensorBoard scalars and heatmaps) and that `eval` of the best
checkpoint reproduces the test metrics."""

import json
from pathlib import Path

import pytest
from helpers import tiny_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint
from attnseq.io.checkpoint import load_checkpoint
from attnseq.training.run import run_training

SCALARS = [
    "train/loss",
    "train/lr",
    "train/tokens_per_sec",
    "valid/loss",
    "valid/ppl",
    "valid/bleu",
    "valid/exact_match",
]


def read_events(run_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    return events


@pytest.fixture(scope="module", params=["rnn", "transformer"])
def trained_run(request, tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp(f"run_{request.param}")
    overrides = (
        ["model.family=transformer", "optim.warmup_steps=2"]
        if request.param == "transformer"
        else []
    )
    metrics = run_training(tiny_config(*overrides, "trainer.num_heatmaps=1"), run_dir)
    return run_dir, metrics


@pytest.mark.slow
def test_run_directory_holds_everything(trained_run) -> None:
    run_dir, metrics = trained_run
    for name in ["checkpoints/best.pt", "checkpoints/last.pt", "metrics.json", "hyps/test.txt"]:
        assert (run_dir / name).is_file(), name
    stored = json.loads((run_dir / "metrics.json").read_text())
    for key in ["test/bleu", "test/chrf", "test/exact_match", "test/loss", "test/ppl"]:
        assert key in stored
    assert stored == pytest.approx(metrics)
    assert len((run_dir / "hyps/test.txt").read_text().splitlines()) == 20


def test_tensorboard_has_scalars_and_heatmaps_at_several_steps(trained_run) -> None:
    run_dir, _ = trained_run
    events = read_events(run_dir)
    tags = events.Tags()
    for tag in SCALARS:
        assert tag in tags["scalars"], tag
    images = [t for t in tags["images"] if t.startswith("attention/example_0")]
    assert images
    steps = [event.step for event in events.Images(images[0])]
    assert steps == [3, 6]  # one heatmap per validation under one stable tag


def test_attention_diagnostics_at_each_validation_and_in_the_test_metrics(trained_run) -> None:
    run_dir, metrics = trained_run
    stored = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 < stored["test/attention/last_source_mass"] < 1.0
    assert stored["test/attention/entropy"] > 0.0
    config = load_checkpoint(run_dir / "checkpoints" / "best.pt")["config"]
    transformer = config["model"]["family"] == "transformer"
    per_layer = {key for key in stored if key.startswith("test/attention/layer")}
    expected = {"layer1/last_source_mass", "layer1/head1/entropy", "layer1/head2/entropy"}
    assert per_layer == ({f"test/attention/{key}" for key in expected} if transformer else set())
    events = read_events(run_dir)
    for name in ("last_source_mass", "entropy", *(["layer1/head1/entropy"] * transformer)):
        steps = [event.step for event in events.Scalars(f"valid/attention/{name}")]
        assert steps == [3, 6], name


def test_checkpoint_is_self_contained(trained_run) -> None:
    run_dir, _ = trained_run
    payload = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert {"config", "tokenizers", "model", "optimizer", "scheduler", "progress", "rng"} <= set(
        payload
    )
    assert payload["progress"]["step"] == 6


def test_eval_reproduces_the_test_metrics(trained_run, tmp_path: Path) -> None:
    run_dir, metrics = trained_run
    again = evaluate_checkpoint(run_dir / "checkpoints" / "best.pt", out_dir=tmp_path)
    for key, value in again.items():
        assert metrics[key] == pytest.approx(value, abs=1e-6), key
    assert (again.result.folder / "metrics.json").is_file()


@pytest.mark.slow
def test_tasks_with_gold_alignments_report_aer(tmp_path: Path) -> None:
    cfg = tiny_config("data.name=reverse", "data.tokenizer=word", "trainer.num_heatmaps=1")
    metrics = run_training(cfg, tmp_path)
    for key in ["test/aer", "test/precision", "test/recall"]:
        assert 0.0 <= metrics[key] <= 1.0, key
    events = read_events(tmp_path)
    drawn = {"valid/examples/attention/entropy", "valid/examples/attention/argmax_weight"}
    assert drawn <= set(events.Tags()["scalars"])  # the heatmap examples' own


@pytest.mark.slow  # a training long enough to learn alignments
def test_a_short_toy_translation_run_learns_to_align(tmp_path: Path) -> None:
    """The alignment acceptance in small: 400 updates of the default GRU + Bahdanau model on
    the toy translation task already put most argmax links on the gold words (the full
    `config=toy_translation_rnn_bahdanau` run is measured in the README)."""
    cfg = config_from_dict(
        config_to_dict(TrainConfig()),
        [
            "data.name=toy_translation",
            "data.tokenizer=word",
            "data.valid_size=100",
            "data.test_size=200",
            "trainer.max_steps=400",
            "trainer.validate_every=400",
            "trainer.progress=false",
            "trainer.device=cpu",
        ],
    )
    metrics = run_training(cfg, tmp_path)
    assert metrics["test/aer"] <= 0.4, metrics


@pytest.mark.slow
def test_a_model_without_attention_trains_on_a_task_with_gold_alignments(tmp_path: Path) -> None:
    """model=rnn_none on reverse (which has gold links): the fixed-vector baseline has no
    attention to score, so the run, its final test evaluation included, ends with its other
    metrics and no AER."""
    cfg = tiny_config("data.name=reverse", "data.tokenizer=word", "model.attention.score=none")
    metrics = run_training(cfg, tmp_path)
    assert "test/exact_match" in metrics and "test/aer" not in metrics


def test_eval_of_a_file_outside_the_config(trained_run, tmp_path: Path) -> None:
    run_dir, _ = trained_run
    data = tmp_path / "extra.jsonl"
    data.write_text(
        '{"src": "March 3, 1998", "tgt": "1998-03-03"}\n'
        '{"src": "4 May 2001", "tgt": "2001-05-04"}\n'
    )
    metrics = evaluate_checkpoint(
        run_dir / "checkpoints" / "best.pt", split=str(data), out_dir=tmp_path / "out"
    )
    assert "extra_jsonl/bleu" in metrics
    assert metrics.result.folder.name.startswith("extra_jsonl.")
    assert len((metrics.result.folder / "hyps.txt").read_text().splitlines()) == 2


@pytest.mark.slow
def test_training_stops_when_validation_reaches_its_ceiling(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """Exact match 1.0 cannot improve: the run stops at that validation, not at max_steps."""
    import logging

    import attnseq.evaluation.metrics

    caplog.set_level(logging.INFO, logger="attnseq")
    monkeypatch.setattr(
        attnseq.evaluation.metrics, "exact_match", lambda hypotheses, references: 1.0
    )
    run_training(tiny_config("trainer.max_steps=12", "trainer.early_stopping_patience=0"), tmp_path)
    payload = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert payload["progress"]["step"] == 3
    assert "reached its best possible value 1" in caplog.text
