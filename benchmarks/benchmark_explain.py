"""Explanation speed: seconds of `attnseq explain` for one long source, end to end as the
command runs it after the model is loaded (decode, attention maps, every attribution method),
and of each attribution method on its own over the same (source, output) pair. Trains nothing.
Prints one JSON object.

Usage (from the repository root):

    # a 100-piece source for a character tokenizer ("中文" fifty times)
    .venv/bin/python benchmarks/benchmark_explain.py best.pt --threads 1

    .venv/bin/python benchmarks/benchmark_explain.py best.pt --src "ein Hund läuft" \\
        --methods integrated-gradients,smoothgrad --repeat 3

Options: --src TEXT (default: "中文" × --copies), --copies N, --tgt TEXT (explained instead
of the model's output), --methods a,b (each timed; default every method the model has),
--beam N, --threads N (torch intra-op threads), --device cpu|cuda|auto, --repeat N (the
fastest of N runs is reported).

The work does not depend on what the weights learned once the output is fixed (teacher
forcing runs a fixed amount of work per step), so an untrained checkpoint of a model's sizes
measures that model; the output an untrained model decodes is its longest. To compare two
versions of the code, run this script from each checkout in turn, one at a time, and compare
the ratios: a shared machine's absolute figures vary from run to run.
"""

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from attnseq.alignment.attribution import attribute
from attnseq.analysis.explanation import available_methods, explain
from attnseq.config.devices import resolve_device
from attnseq.errors import UserError
from attnseq.models.loading import load_trained_model


def fastest(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The shortest of `repeat` timed calls of `run`, in seconds, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--src")
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--tgt")
    parser.add_argument("--methods")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=1)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    src = args.src if args.src is not None else "中文" * args.copies
    try:
        if args.repeat < 1:
            raise UserError("--repeat must be at least 1")
        trained = load_trained_model(args.checkpoint)
        device = resolve_device(args.device)
        trained.model.to(device)
        methods = args.methods.split(",") if args.methods else available_methods(trained)
        explain_seconds, explanation = fastest(
            lambda: explain(trained, src, args.tgt, beam=args.beam, methods=methods, device=device),
            args.repeat,
        )
        pairs = [(src, output.text) for output in explanation.outputs]
        rows = []
        for method in methods:
            seconds, _ = fastest(lambda m=method: attribute(trained, pairs, m), args.repeat)
            rows.append({"method": method, "seconds": round(seconds, 3)})
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    parameters = sum(p.numel() for p in trained.model.parameters())
    report = {
        "checkpoint": str(args.checkpoint),
        "model": f"{type(trained.model).__name__}, {parameters:,} parameters",
        "source_pieces": len(explanation.source_pieces),
        "output_pieces": [len(output.pieces) for output in explanation.outputs],
        "threads": torch.get_num_threads(),
        "device": str(device),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "explain_seconds": round(explain_seconds, 3),
        "methods": rows,
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
