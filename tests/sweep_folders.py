"""Hand-made Hydra multirun folders for the tests of attnseq/analysis/sweep_report.py and
`attnseq sweep-report`: each job's .hydra/ files and metrics.json, written as a finished job
leaves them."""

import json
import os
from pathlib import Path

import yaml

# model -> seed -> (test/bleu, test/chrf); transformer seed 3 never finished
RESULTS = {
    "rnn": {1: (20.0, 40.0), 2: (22.0, 41.0), 3: (24.0, 45.0)},
    "transformer": {1: (30.0, 50.0), 2: (34.0, 52.0), 3: None},
}


def make_job(root: Path, name: str, overrides: list[str], metrics: dict | None) -> None:
    hydra_dir = root / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if metrics is not None:
        (root / name / "metrics.json").write_text(json.dumps(metrics))


def make_timed_job(root: Path, name: str, overrides: list[str], metrics: dict | None, minutes: int):
    hydra_dir = root / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    for file in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (hydra_dir / file).write_text(yaml.safe_dump(overrides))
        os.utime(hydra_dir / file, (1_000_000, 1_000_000))
    if metrics is not None:
        (root / name / "metrics.json").write_text(json.dumps(metrics))
        os.utime(root / name / "metrics.json", (0, 1_000_000 + 60 * minutes))


def write_hand_made(tmp_path: Path) -> Path:
    """A hand-made multirun under `tmp_path`: jobs 0-2 finished, job 3 without metrics.json;
    optimized_metric = test/bleu."""
    root = tmp_path / "multirun" / "2026-11-22" / "10-00-00"
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "test/bleu"}))
    common = ["data=reverse", "trainer.max_steps=100"]
    make_job(
        root,
        "0",
        ["model=rnn_luong", "optim.lr=0.001", *common],
        {"test/bleu": 20.0, "test/loss": 1.5, "best_step": 100},
    )
    make_job(
        root,
        "1",
        ["model=transformer", "optim.lr=0.001", *common],
        {"test/bleu": 40.5, "test/loss": 1.2, "best_step": 80},
    )
    make_job(
        root,
        "2",
        ["model=rnn_luong", "optim.lr=0.0003", *common],
        {"test/bleu": 30.25, "test/loss": 1.1, "best_step": 100},
    )
    make_job(root, "3", ["model=transformer", "optim.lr=0.0003", *common], None)
    return root


def write_seeded(tmp_path: Path) -> Path:
    """A hand-made multirun with seeds under `tmp_path`: two models by three seeds (RESULTS),
    jobs 2 + N minutes long."""
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "multirun.yaml").write_text(yaml.safe_dump({"optimized_metric": "test/bleu"}))
    number = 0
    for model, seeds in RESULTS.items():
        for seed, values in seeds.items():
            metrics = None
            if values is not None:
                metrics = {"test/bleu": values[0], "test/chrf": values[1], "best_step": 100}
            overrides = [f"model={model}", f"seed={seed}", "data=reverse"]
            make_timed_job(root, str(number), overrides, metrics, minutes=2 + number)
            number += 1
    return root
