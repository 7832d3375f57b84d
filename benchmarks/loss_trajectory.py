"""The first updates of packaged experiments, recorded bit for bit, to show that a change of the
code's structure leaves training unchanged.

For each experiment the script trains `--steps` updates on one thread (`attnseq train
config=NAME trainer.max_steps=N trainer.log_every=1`, no validation before the end), then keeps
the training loss of every update as TensorBoard stored it (`train/loss`, float32, written as
its exact hex) and a SHA-256 of the final weights (every tensor of last.pt's model state, in
name order, as raw bytes). `record` writes them to a JSON file; `compare` trains again and
lists every update and weight digest that differs. Floating point results of one torch build
on one host are deterministic on one thread, so compare a record with a run on the same host.

Usage (from the repository root; the Multi30k experiment needs the shared corpora):

    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/loss_trajectory.py record before.json
    ... change the code ...
    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/loss_trajectory.py compare before.json

Exit status of `compare`: 0 identical, 1 a difference (each one printed).
"""

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

EXPERIMENTS = ["reverse_rnn_bahdanau", "dates_transformer", "multi30k_transformer"]


def train(config: str, steps: int, run_dir: Path) -> None:
    """`attnseq train config=CONFIG` for `steps` updates into `run_dir`, one thread."""
    command = [
        sys.executable, "-m", "attnseq", "train", f"config={config}",
        f"trainer.max_steps={steps}", "trainer.log_every=1", f"trainer.validate_every={steps}",
        "trainer.threads=1", "trainer.progress=false", "trainer.num_heatmaps=0",
        "trainer.device=cpu", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def losses(run_dir: Path) -> dict[int, str]:
    """step -> train/loss of that update, as the float32 TensorBoard stored, in hex."""
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    return {
        event.step: float(np.float32(event.value)).hex() for event in events.Scalars("train/loss")
    }


def weights_digest(checkpoint: Path) -> str:
    """SHA-256 of every tensor of the checkpoint's model state, in name order, as raw bytes."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode("utf-8"))
        digest.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def trajectory(config: str, steps: int) -> dict[str, Any]:
    """The losses and final weights digest of `steps` updates of `config`."""
    with tempfile.TemporaryDirectory(prefix="trajectory-") as folder:
        run_dir = Path(folder) / config
        train(config, steps, run_dir)
        return {
            "losses": losses(run_dir),
            "weights": weights_digest(run_dir / "checkpoints" / "last.pt"),
        }


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per experiment, update or digest that is not bit for bit the same."""
    found = []
    for config, old in before.items():
        new = after.get(config)
        if new is None:
            found.append(f"{config}: not run")
            continue
        old_losses = {int(step): value for step, value in old["losses"].items()}
        new_losses = {int(step): value for step, value in new["losses"].items()}
        for step in sorted(old_losses.keys() | new_losses.keys()):
            if old_losses.get(step) != new_losses.get(step):
                found.append(
                    f"{config} update {step}: loss {old_losses.get(step)} -> {new_losses.get(step)}"
                )
        if old["weights"] != new["weights"]:
            found.append(f"{config}: final weights differ")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["record", "compare"])
    parser.add_argument("file", type=Path, help="the record: written by record, read by compare")
    parser.add_argument("--steps", type=int, default=30, help="updates per experiment")
    parser.add_argument("--configs", nargs="+", default=EXPERIMENTS, help="packaged experiments")
    args = parser.parse_args(argv)
    if args.action == "compare":
        before = json.loads(args.file.read_text(encoding="utf-8"))
        after = {config: trajectory(config, args.steps) for config in before}
        found = differences(before, after)
        for line in found:
            print(line)
        print(f"{len(before)} experiments, {'identical' if not found else 'DIFFERENT'}")
        return 1 if found else 0
    record = {config: trajectory(config, args.steps) for config in args.configs}
    args.file.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"recorded {', '.join(record)} ({args.steps} updates each) in {args.file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
