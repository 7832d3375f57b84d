"""Where a training update spends its time: torch.profiler over real updates of a config.

The updates are `Trainer.update` on the config's real length-bucketed batches, as
`attnseq train` runs them (built like benchmarks/benchmark.py builds them). Two views:

* phases: the update's wall time split into forward + loss, backward (the autograd engine's
  functions), gradient clipping and the optimizer step (`Optimizer.step`); "other" is what is
  left (collation is not inside the update and is not counted);
* operators: the operators with the most self CPU time (time in the operator itself, not in
  the operators it calls), as a share of all profiled self time.

Usage (from the repository root):

    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/profile_training.py \\
        "config=multi30k_transformer" "config=multi30k_rnn_bahdanau" --steps 10

Each positional argument is one setup (space-separated `attnseq train` overrides). Prints a
markdown table per setup and, with --out, writes everything as JSON. The profiler adds some
overhead of its own, so use benchmarks/benchmark.py for throughput and this for shares.
"""

import argparse
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmark.py, next to this file

from benchmark import build_trainer, compose, training_batches  # noqa: E402

from attnseq.errors import UserError  # noqa: E402

BACKWARD_PREFIX = "autograd::engine::evaluate_function"
OPTIMIZER_PREFIX = "Optimizer.step#"
CLIPPING_OPS = ("aten::_foreach_norm", "aten::_foreach_mul_", "aten::linalg_vector_norm")


def phases(events: Any, wall_us: float) -> dict[str, float]:
    """Shares of the profiled wall time per phase, from the top-level profiler events."""
    totals: dict[str, float] = defaultdict(float)
    for event in events:
        if event.cpu_parent is not None:  # inclusive times of top-level events only
            continue
        if event.name.startswith(BACKWARD_PREFIX):
            totals["backward"] += event.cpu_time_total
        elif event.name.startswith(OPTIMIZER_PREFIX):
            totals["optimizer step"] += event.cpu_time_total
        elif event.name in CLIPPING_OPS:
            totals["gradient clipping"] += event.cpu_time_total
        else:
            totals["forward + loss"] += event.cpu_time_total
    totals["other"] = max(wall_us - sum(totals.values()), 0.0)
    return {name: round(100 * value / wall_us, 1) for name, value in totals.items()}


def top_operators(averages: Any, count: int) -> list[dict[str, Any]]:
    """The `count` operators with the most self CPU time, with their share (%) of all of it."""
    total = sum(item.self_cpu_time_total for item in averages) or 1.0
    ranked = sorted(averages, key=lambda item: item.self_cpu_time_total, reverse=True)
    return [
        {
            "operator": item.key,
            "self_cpu_share": round(100 * item.self_cpu_time_total / total, 1),
            "calls": item.count,
        }
        for item in ranked[:count]
    ]


def profile_setup(overrides: list[str], steps: int, warmup: int, threads: int, top: int) -> dict:
    cfg = compose(overrides, threads)
    torch.set_num_threads(threads)
    trainer, _, _ = build_trainer(cfg, torch.device("cpu"), validate=False)
    model = trainer.model
    stream = training_batches(trainer)
    for _ in range(warmup):
        trainer.update([next(stream)])
    batches = [next(stream) for _ in range(steps)]  # collated before, outside the profile
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for batch, counts in batches:
            trainer.update([(batch, counts)])
    wall_us = 1e6 * (time.perf_counter() - start)
    target_tokens = sum(counts.tgt for _, counts in batches)
    return {
        "setup": " ".join(overrides),
        "model": type(model).__name__,
        "steps": steps,
        "profiled_tgt_tokens_per_sec": round(target_tokens / (wall_us / 1e6), 1),
        "phases_percent": phases(profiler.events(), wall_us),
        "top_operators": top_operators(profiler.key_averages(), top),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [f"### {result['setup']} ({result['model']}, {result['steps']} updates)", ""]
    phase_text = ", ".join(f"{name} {share}%" for name, share in result["phases_percent"].items())
    lines += [f"phases: {phase_text}", "", "| operator | self CPU % | calls |", "|---|---:|---:|"]
    lines += [
        f"| `{row['operator']}` | {row['self_cpu_share']} | {row['calls']} |"
        for row in result["top_operators"]
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("setups", nargs="+", help="setups, each a space-separated override list")
    parser.add_argument("--steps", type=int, default=10, help="profiled updates")
    parser.add_argument("--warmup", type=int, default=3, help="unprofiled updates first")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--top", type=int, default=12, help="operators listed")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.top < 1:
        parser.error("--steps, --threads and --top must be >= 1 and --warmup >= 0")
    results = []
    try:
        for setup in args.setups:
            overrides = shlex.split(setup)
            results.append(
                profile_setup(overrides, args.steps, args.warmup, args.threads, args.top)
            )
            print(markdown(results[-1]) + "\n")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.out:
        from attnseq.io.atomic import atomic_write_json

        atomic_write_json(args.out, {"results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
