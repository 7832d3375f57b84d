"""Experiment trackers against the real libraries: an MLflow run read back with MlflowClient
(params, step metrics, an alignment PNG, provenance tags, the config, log, metrics and
checkpoint artifacts), a W&B offline run folder holding the same metrics and files, and the
one-line refusal when a selected tracker's library is missing."""

import importlib.util
import json
import struct
from pathlib import Path

import matplotlib.image
import pytest
import torch
import yaml
from helpers import (
    TINY,
    assert_refused,
    attnseq,
    built_once,
    check_train_args,
    train_in_process,
)

from attnseq.config.choices import Tracker
from attnseq.errors import UserError
from attnseq.training import trackers
from attnseq.training.provenance import installed_version
from attnseq.training.trackers import MLflowTracker, check_trackers_installed

# find_spec, not importorskip: importing both libraries takes seconds, paid only by the worker
# that runs these tests, not by every worker's collection.
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs attnseq[mlflow]"),
    pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="needs attnseq[wandb]"),
]

STEPS = ["trainer.max_steps=4", "trainer.validate_every=2", "trainer.log_every=1"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny run logged to MLflow and W&B (and not to TensorBoard), in a process of its own:
    W&B redirects the process's output streams, which the other tests here share."""
    overrides = ["logger=[mlflow,wandb]", "optim.lr=0.003", "trainer.progress=false", *STEPS]
    overrides += ["trainer.num_heatmaps=1"]  # the heatmap each tracker logs
    overrides += ["tracker.log_checkpoint=best"]

    def train(run_dir: Path) -> None:
        result = attnseq("train", *TINY, *overrides, f"hydra.run.dir={run_dir}", cwd=run_dir)
        assert result.returncode == 0, result.stderr

    return built_once(tmp_path_factory, "tracked-run", train)


@pytest.mark.slow
def test_only_the_selected_trackers_write(run_dir: Path) -> None:
    assert (run_dir / "mlflow.db").is_file() and (run_dir / "wandb").is_dir()
    assert not (run_dir / "tb").exists()


@pytest.mark.slow
def test_mlflow_client_reads_back_params_step_metrics_and_a_heatmap(run_dir, tmp_path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("attnseq")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags[trackers.RUN_DIR_TAG] == str(run_dir)
    params = run.data.params
    assert params["optim.lr"] == "0.003" and params["model.hidden"] == "16"
    assert params["seed"] == "1" and params["trainer.max_steps"] == "4"  # defaults too
    assert int(params["n_params"]) > 0
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert [metric.step for metric in history] == [1, 2, 3, 4]
    assert all(metric.value > 0 for metric in history)
    valid = client.get_metric_history(run.info.run_id, "valid/loss")
    assert [metric.step for metric in valid] == [2, 4]
    assert [metric.step for metric in client.get_metric_history(run.info.run_id, "test/bleu")] == [
        4
    ]
    names = [item.path for item in client.list_artifacts(run.info.run_id, "attention/example_0")]
    assert names == ["attention/example_0/step_0000002.png", "attention/example_0/step_0000004.png"]
    png = client.download_artifacts(run.info.run_id, names[0], str(tmp_path))
    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 100 and width > 100
    examples = client.list_artifacts(run.info.run_id, "valid/examples")
    assert [item.path.rsplit("/", 1)[1] for item in examples] == [
        "step_0000002.md",
        "step_0000004.md",
    ]


def _wandb_records(path: Path):
    """The records of a W&B transaction log (`run-ID.wandb`): a 7-byte header (":W&B", magic,
    version), then LevelDB's log format: 32 KiB blocks of chunks with a 7-byte header (CRC,
    length, type: 1 full, 2 first, 3 middle, 4 last) holding protobuf `Record`s."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, parts = 32768, 7, []
    while position + 7 <= len(data):
        left = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left < 7 or kind == 0:  # the block's zero padding
            position += left
            continue
        parts.append(data[position + 7 : position + 7 + length])
        position += 7 + length
        if kind in (1, 4):
            yield wandb_internal_pb2.Record.FromString(b"".join(parts))
            parts = []
        elif kind == 2:
            parts = parts[-1:]


def _history_items(record) -> dict[str, str]:
    """A history record's values (JSON text) by metric name (W&B stores `a/b` as the nested
    key [a, b])."""
    items = record.history.item
    return {item.key or "/".join(item.nested_key): item.value_json for item in items}


@pytest.mark.slow
def test_wandb_offline_run_folder_holds_the_metrics(run_dir: Path) -> None:
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    (log_file,) = folder.glob("run-*.wandb")
    history, config = {}, {}
    for record in _wandb_records(log_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = _history_items(record)
            history[int(items["_step"])] = items
        elif kind in ("run", "config"):  # the config at wandb.init, then its updates
            updates = record.run.config.update if kind == "run" else record.config.update
            config.update({item.key: item.value_json for item in updates})
    assert sorted(history) == [1, 2, 3, 4]
    assert all(float(history[step]["train/loss"]) > 0 for step in history)
    assert "valid/loss" in history[2] and "valid/loss" in history[4]
    assert config["optim.lr"] == "0.003" and config["seed"] == "1"
    assert int(config["n_params"]) > 0
    images = list((folder / "files" / "media" / "images" / "attention").glob("example_0_*.png"))
    assert len(images) == 2


@pytest.mark.slow
def test_mlflow_and_wandb_see_the_same_losses(run_dir: Path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("attnseq").experiment_id])
    mlflow_losses = [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")]
    (log_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    wandb_losses = [
        float(items["train/loss"])
        for items in map(_history_items, _wandb_records(log_file))
        if "train/loss" in items
    ]
    assert wandb_losses == pytest.approx(mlflow_losses)


@pytest.mark.slow
def test_a_resumed_run_continues_its_mlflow_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = MLflowTracker(uri, "attnseq", tmp_path / "run", {"seed": 1}, resumed=False)
    first.add_scalar("train/loss", 2.0, 1)
    first.close(succeeded=False)
    again = MLflowTracker(uri, "attnseq", tmp_path / "run", {"seed": 1, "n": 2}, resumed=True)
    again.add_scalar("train/loss", 1.0, 2)
    again.close()
    assert again.run_id == first.run_id
    history = again.client.get_metric_history(again.run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(1, 2.0), (2, 1.0)]
    assert again.client.get_run(again.run_id).data.params == {"seed": "1", "n": "2"}
    other = MLflowTracker(uri, "attnseq", tmp_path / "other", {}, resumed=True)
    assert other.run_id != first.run_id  # nothing to continue: a new run


def test_a_missing_tracker_library_names_its_extra(monkeypatch) -> None:
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(
        trackers.importlib.util, "find_spec", lambda name: None if name == "mlflow" else real(name)
    )
    with pytest.raises(UserError, match=r"pip install 'attnseq\[mlflow\]'"):
        check_trackers_installed([Tracker.tensorboard, Tracker.mlflow])
    # the start checks of `attnseq train` (in this process, where wandb's and mlflow's logging
    # handlers of the other tests would not survive Hydra's logging set-up)
    with pytest.raises(UserError, match="logger=mlflow needs the mlflow package"):
        check_train_args([*TINY, "logger=[tensorboard,mlflow]"])


@pytest.mark.slow
def test_a_misspelt_tracker_is_refused_with_the_nearest_name(tmp_path) -> None:
    code, output = train_in_process(tmp_path, *TINY, "logger=[tensorboard,mlfow]")
    assert_refused(tmp_path, code, output, "expected one of [tensorboard, mlflow, wandb]")
    assert "Did you mean 'mlflow'?" in output


@pytest.mark.slow
def test_mlflow_run_carries_its_provenance_and_files(run_dir: Path, tmp_path: Path) -> None:
    """Versions, git commit, command and name as tags; the resolved config, train.log,
    metrics.json and best.pt as artifacts: the run can be compared and rebuilt from MLflow."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("attnseq").experiment_id])
    tags = run.data.tags
    assert tags["attnseq.version"] == installed_version()
    assert tags["attnseq.torch_version"] == torch.__version__
    assert tags["attnseq.git"].startswith(("git commit ", "no git commit", "git not available"))
    assert "trainer.max_steps=4" in tags["attnseq.command"]
    assert tags["attnseq.name"] == "default"
    names = {item.path for item in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "train.log", "metrics.json", "checkpoints"} <= names
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == [
        "checkpoints/best.pt"
    ]
    metrics = Path(client.download_artifacts(run.info.run_id, "metrics.json", str(tmp_path)))
    assert json.loads(metrics.read_text()) == json.loads((run_dir / "metrics.json").read_text())
    config = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path)))
    resolved = yaml.safe_load(config.read_text())
    assert resolved["optim"]["lr"] == 0.003 and resolved["trainer"]["max_steps"] == 4


@pytest.mark.slow
def test_wandb_run_keeps_provenance_and_files(run_dir: Path) -> None:
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    files = {path.name for path in (folder / "files").rglob("*") if path.is_file()}
    assert {"config.yaml", "train.log", "metrics.json", "best.pt"} <= files
    config = yaml.safe_load((folder / "files" / "config.yaml").read_text())
    assert config["optim"]["lr"] == 0.003
