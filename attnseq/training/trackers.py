"""Experiment trackers (`logger=[tensorboard,mlflow,wandb]`), behind the methods of
TensorBoard's SummaryWriter (docs/internals/training.md)."""

import hashlib
import importlib.util
import logging
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnseq.config.choices import CheckpointUpload, Tracker
from attnseq.config.conversion import config_to_dict, flat_config
from attnseq.config.schema import TrainConfig
from attnseq.errors import UserError
from attnseq.training.provenance import git_description, installed_version

log = logging.getLogger("attnseq")

# the MLflow tag that names the run directory a run belongs to (how a resumed run finds it)
RUN_DIR_TAG = "attnseq.run_dir"


def check_trackers_installed(trackers: Sequence[Tracker]) -> None:
    """Raise UserError naming the extra to install for each selected tracker whose library is
    missing (TensorBoard comes with attnseq)."""
    missing = [
        tracker.value
        for tracker in dict.fromkeys(trackers)
        if tracker is not Tracker.tensorboard and importlib.util.find_spec(tracker.value) is None
    ]
    if missing:
        extras = ",".join(missing)
        raise UserError(
            f"logger={', '.join(missing)} needs the {' and '.join(missing)} package: "
            f"pip install 'attnseq[{extras}]'"
        )


def tracker_params(cfg: TrainConfig) -> dict[str, Any]:
    """Every config value of the run as flat `a.b` keys (None as "None", lists as text), the
    params a tracker records; `resume` is left out (it says where a run continued from, not
    what it trains)."""
    scalar = (int, float, str, bool)
    params = {}
    for key, value in sorted(flat_config(config_to_dict(cfg)).items()):
        if key == "resume":
            continue
        if value is None:
            value = "None"
        params[key] = value if isinstance(value, scalar) else str(value)
    return params


def run_provenance(cfg: TrainConfig) -> dict[str, str]:
    """Where a run comes from, as `attnseq.*` tags: versions, the git commit of the working
    directory (", dirty" when tracked files changed), the command line and the run's name."""
    import torch

    return {
        "attnseq.version": installed_version(),
        "attnseq.torch_version": torch.__version__,
        "attnseq.python_version": platform.python_version(),
        "attnseq.git": git_description(Path.cwd()),
        "attnseq.command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "attnseq.name": cfg.name,
    }


def final_artifacts(cfg: TrainConfig, run_dir: Path) -> list[Path]:
    """The files a tracker keeps when the run ends (those that exist then): train.log,
    metrics.json and the checkpoint `tracker.log_checkpoint` names."""
    files = [run_dir / "train.log", run_dir / "metrics.json"]
    if cfg.tracker.log_checkpoint is not CheckpointUpload.none:
        files.append(run_dir / "checkpoints" / f"{cfg.tracker.log_checkpoint.value}.pt")
    return files


def resolved_config_yaml(cfg: TrainConfig) -> str:
    import yaml

    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, allow_unicode=True)


class RunTrackers:
    """One writer for the training code: each call goes to every selected tracker.

    Args:
        trackers: objects with SummaryWriter's methods (add_scalar, add_text, add_image,
            add_hparams, flush, close).
    """

    def __init__(self, trackers: list[Any]) -> None:
        self.trackers = trackers

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        for tracker in self.trackers:
            tracker.add_scalar(tag, value, step)

    def add_text(self, tag: str, text: str, step: int) -> None:
        for tracker in self.trackers:
            tracker.add_text(tag, text, step)

    def add_image(self, tag: str, image: Any, step: int, dataformats: str = "HWC") -> None:
        """`image`: an (H, W, 3) uint8 RGB array (dataformats "HWC", as log_heatmap draws)."""
        for tracker in self.trackers:
            tracker.add_image(tag, image, step, dataformats=dataformats)

    def add_hparams(
        self,
        hparams: dict[str, Any],
        metrics: dict[str, float],
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        for tracker in self.trackers:
            tracker.add_hparams(hparams, metrics, run_name=run_name, global_step=global_step)

    def flush(self) -> None:
        for tracker in self.trackers:
            tracker.flush()

    def close(self, succeeded: bool = True) -> None:
        """Close every tracker; MLflow and W&B record whether the run finished or failed."""
        for tracker in self.trackers:
            if isinstance(tracker, MLflowTracker | WandbTracker):
                tracker.close(succeeded)
            else:
                tracker.close()


def open_trackers(cfg: TrainConfig, run_dir: Path, resume_step: int | None) -> RunTrackers:
    """The trackers `cfg.logger` selects for a run in `run_dir`. `resume_step`: the step of
    the checkpoint a resumed run continues from (None: a fresh run); TensorBoard hides the
    events after it that a killed process logged, so the curves go on without a doubled
    stretch. The trackers' libraries are checked as the run starts (run_checks.py)."""
    trackers: list[Any] = []
    params = tracker_params(cfg)
    record = RunRecord(
        run_provenance(cfg), resolved_config_yaml(cfg), final_artifacts(cfg, run_dir)
    )
    for tracker in dict.fromkeys(cfg.logger):
        if tracker is Tracker.tensorboard:
            purge = resume_step + 1 if resume_step is not None else None
            trackers.append(tensorboard_writer(run_dir / "tb", purge))
        elif tracker is Tracker.mlflow:
            uri = mlflow_tracking_uri(cfg, run_dir)
            artifacts = None
            if cfg.tracker.mlflow_tracking_uri is None:
                artifacts = (run_dir / "mlartifacts").absolute().as_uri()
            resumed = resume_step is not None
            trackers.append(
                MLflowTracker(uri, cfg.tracker.project, run_dir, params, resumed, artifacts, record)
            )
        elif tracker is Tracker.wandb:
            trackers.append(WandbTracker(cfg.tracker.project, run_dir, params, record))
    return RunTrackers(trackers)


def tensorboard_writer(folder: Path, purge_step: int | None = None) -> Any:
    """TensorBoard's SummaryWriter into `folder`, whose `add_hparams` records the run for the
    HParams tab as TensorBoard compares runs (`TensorBoardWriter`)."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    class TensorBoardWriter(SummaryWriter):
        """A SummaryWriter whose hyperparameters are a session of this run alone: its values
        and its metrics at the final step, without the experiment summary SummaryWriter adds.

        Without one, TensorBoard describes the experiment from every run it shows: it finds
        which settings differ between them and lists those first (its HParams tab shows the
        first five columns), where an experiment summary, read from one run, says none
        differs and leaves them in alphabetical order. The metric columns are the run's
        scalars in alphabetical order, also five shown: the test split's attention
        diagnostics (test/attention/*, before test/bleu) stay in metrics.json and the other
        trackers.
        """

        def add_hparams(
            self,
            hparam_dict: dict[str, Any],
            metric_dict: dict[str, float],
            hparam_domain_discrete: Any = None,
            run_name: str | None = None,
            global_step: int | None = None,
        ) -> None:
            shown = {k: v for k, v in metric_dict.items() if not k.startswith("test/attention/")}
            _, session_start, session_end = hparams(hparam_dict, shown, hparam_domain_discrete)
            file_writer = self._get_file_writer()
            file_writer.add_summary(session_start, global_step)
            for tag, value in shown.items():
                self.add_scalar(tag, value, global_step)
            file_writer.add_summary(session_end, global_step)

    return TensorBoardWriter(str(folder), purge_step=purge_step)


@dataclass
class RunRecord:
    """What a tracker keeps beside the metrics: `provenance` tags, the resolved config as
    YAML, and the files to upload when the run ends (`final_artifacts`)."""

    provenance: dict[str, str] = field(default_factory=dict)
    config_yaml: str = ""
    final_files: list[Path] = field(default_factory=list)


def mlflow_tracking_uri(cfg: TrainConfig, run_dir: Path) -> str:
    """`tracker.mlflow_tracking_uri`, or the run directory's own store sqlite:///RUN_DIR/mlflow.db."""
    if cfg.tracker.mlflow_tracking_uri:
        return cfg.tracker.mlflow_tracking_uri
    return f"sqlite:///{(run_dir / 'mlflow.db').absolute()}"


def _artifact_name(tag: str, step: int, suffix: str) -> str:
    """`attention/example_0` at step 250 -> `attention/example_0/step_0000250.png`: one folder
    per tag, the steps in order."""
    return f"{tag}/step_{step:07d}{suffix}"


class MLflowTracker:
    """One MLflow run: params, step metrics, figures and texts as artifacts.

    Args:
        tracking_uri: where the runs are stored (a `file:` URI: a local file store).
        experiment: the MLflow experiment the run belongs to (created when missing).
        run_dir: the attnseq run directory, recorded as the run's `attnseq.run_dir` tag and
            its name.
        params: the config values, logged as params.
        resumed: continue the latest run of `run_dir` (when the store holds one).
        artifact_location: where a new experiment keeps its runs' artifacts (None: the
            store's default).
        record: provenance tags, the config and the files kept at the end.
    """

    # metrics kept in memory before they are written in one batch (MLflow takes <= 1000)
    BATCH = 500

    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        run_dir: Path,
        params: dict[str, Any],
        resumed: bool,
        artifact_location: str | None = None,
        record: RunRecord | None = None,
    ) -> None:
        from mlflow import MlflowClient

        self.record = record or RunRecord()

        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            experiment_id = found.experiment_id
        else:
            experiment_id = self.client.create_experiment(experiment, artifact_location)
        run_dir_text = str(run_dir.absolute())
        run = self._previous_run(experiment_id, run_dir_text) if resumed else None
        if run is None:
            tags = {RUN_DIR_TAG: run_dir_text, "mlflow.source.name": "attnseq train"}
            run = self.client.create_run(experiment_id, tags=tags, run_name=run_dir.name)
        else:
            self.client.update_run(run.info.run_id, status="RUNNING")
        self.run_id = run.info.run_id
        for key, value in self.record.provenance.items():  # a resumed session: its own
            self.client.set_tag(self.run_id, key, value)
        if self.record.config_yaml:
            self.client.log_text(self.run_id, self.record.config_yaml, "config.yaml")
        self.logged_params = dict(run.data.params)
        self.pending: list[Any] = []
        self._log_params(params)

    def _previous_run(self, experiment_id: str, run_dir: str) -> Any:
        runs = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{RUN_DIR_TAG}` = '{run_dir}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return runs[0] if runs else None

    def _log_params(self, params: dict[str, Any]) -> None:
        """Params not logged yet (a resumed run keeps its first values: MLflow params are
        immutable), in batches of 100, MLflow's limit per call."""
        from mlflow.entities import Param

        logged = self.logged_params
        new = [Param(key, str(value)) for key, value in params.items() if key not in logged]
        for start in range(0, len(new), 100):
            self.client.log_batch(self.run_id, params=new[start : start + 100])
        self.logged_params.update({param.key: param.value for param in new})

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        from mlflow.entities import Metric

        self.pending.append(Metric(tag, float(value), int(time.time() * 1000), int(step)))
        if len(self.pending) >= self.BATCH:
            self.flush()

    def add_text(self, tag: str, text: str, step: int) -> None:
        self.client.log_text(self.run_id, text, _artifact_name(tag, step, ".md"))

    def add_image(self, tag: str, image: Any, step: int, dataformats: str = "HWC") -> None:
        if dataformats != "HWC":
            raise ValueError(f"MLflowTracker takes (H, W, C) images, not {dataformats}")
        self.client.log_image(self.run_id, image, artifact_file=_artifact_name(tag, step, ".png"))

    def add_hparams(
        self,
        hparams: dict[str, Any],
        metrics: dict[str, float],
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """The params not logged at the start (the parameter count) and the final metrics."""
        self._log_params(hparams)
        for tag, value in metrics.items():
            self.add_scalar(tag, value, global_step or 0)

    def flush(self) -> None:
        if self.pending:
            self.client.log_batch(self.run_id, metrics=self.pending)
            self.pending = []

    def close(self, succeeded: bool = True) -> None:
        self.flush()
        for path in self.record.final_files:
            if path.is_file():
                folder = "checkpoints" if path.suffix == ".pt" else None
                self.client.log_artifact(self.run_id, str(path), folder)
        self.client.set_terminated(self.run_id, "FINISHED" if succeeded else "FAILED")


class WandbTracker:
    """One Weights & Biases run in offline mode under RUN_DIR/wandb.

    Its id is derived from the run directory, so a resumed run continues the same W&B run
    (`wandb sync` joins the offline folders of its sessions).
    """

    def __init__(
        self, project: str, run_dir: Path, params: dict[str, Any], record: RunRecord | None = None
    ) -> None:
        import wandb

        self.record, self.run_dir = record or RunRecord(), run_dir

        self.wandb = wandb
        run_id = hashlib.sha256(str(run_dir.absolute()).encode()).hexdigest()[:16]
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project,
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode="offline",
            config={**params, **self.record.provenance},
            settings=wandb.Settings(silent=True, console="off"),
        )
        if self.record.config_yaml:
            config_file = Path(self.run.dir) / "config.yaml"
            config_file.write_text(self.record.config_yaml, encoding="utf-8")

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.run.log({tag: float(value)}, step=int(step))

    def add_text(self, tag: str, text: str, step: int) -> None:
        self.run.log({tag: self.wandb.Html(f"<pre>{_html_escaped(text)}</pre>")}, step=int(step))

    def add_image(self, tag: str, image: Any, step: int, dataformats: str = "HWC") -> None:
        if dataformats != "HWC":
            raise ValueError(f"WandbTracker takes (H, W, C) images, not {dataformats}")
        self.run.log({tag: self.wandb.Image(image)}, step=int(step))

    def add_hparams(
        self,
        hparams: dict[str, Any],
        metrics: dict[str, float],
        run_name: str | None = None,
        global_step: int | None = None,
    ) -> None:
        """The parameter count joins the config; the final metrics the run's summary."""
        self.run.config.update({"n_params": hparams.get("n_params")}, allow_val_change=True)
        self.run.summary.update(metrics)

    def flush(self) -> None:
        pass  # run.log hands every record to W&B's service process at once

    def close(self, succeeded: bool = True) -> None:
        for path in self.record.final_files:
            if path.is_file():  # copied into the run's files/, which `wandb sync` uploads
                self.run.save(str(path), base_path=str(self.run_dir), policy="now")
        self.run.finish(exit_code=0 if succeeded else 1)


def _html_escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
