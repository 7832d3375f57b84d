"""Word-alignment speed: sentence pairs per second of `attnseq align` (forced decoding, the
attention read per target word, word-level links), end to end as the command runs it after the
model is loaded: tokenize, map pieces to words, batch by length, one teacher-forced pass per
batch, pool to words, argmax. Trains nothing. Prints one JSON object.

Usage (from the repository root):

    # the pairs of a file pair (the first --pairs lines)
    .venv/bin/python benchmarks/benchmark_align.py best.pt --src train.de --tgt train.en \\
        --pairs 10000 --threads 2

    # the checkpoint's own training pairs (needs its data, e.g. ATTNSEQ_DATA=../shared/data)
    .venv/bin/python benchmarks/benchmark_align.py best.pt --pairs 10000

Options: --methods attention,shift-att (each timed), --batch-size N (pairs per forward pass,
as `attnseq align --batch-size`), --threads N (torch intra-op threads), --device cpu|cuda|auto,
--warmup N (pairs aligned once before timing).

The speed does not depend on what the weights learned (teacher forcing runs a fixed amount of
work per pair), so any checkpoint of a model's sizes and tokenizers measures that model.
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnseq.alignment.forced import ALIGNMENT_METHODS, AlignmentMethod, align_sentences
from attnseq.config.devices import resolve_device
from attnseq.data.sources import load_splits
from attnseq.errors import UserError
from attnseq.models.loading import TrainedModel, load_trained_model


def read_pairs(trained: TrainedModel, src: Path | None, tgt: Path | None, n: int) -> tuple:
    """The first `n` (source, target) lines of the files, or of the checkpoint's train split;
    pairs with an empty side are left out (`align` refuses them)."""
    if src is not None and tgt is not None:
        with src.open(encoding="utf-8") as s, tgt.open(encoding="utf-8") as t:
            pairs = [(a.rstrip("\n"), b.rstrip("\n")) for a, b in zip(s, t, strict=False)]
    else:
        pairs = load_splits(trained.cfg.data, trained.cfg.seed)["train"]
    pairs = [(a, b) for a, b in pairs if a.strip() and b.strip()][:n]
    return [a for a, _ in pairs], [b for _, b in pairs]


def time_method(
    trained: TrainedModel,
    sources: list[str],
    targets: list[str],
    method: AlignmentMethod,
    device: torch.device,
    batch_size: int,
    warmup: int,
) -> dict[str, Any]:
    """One timed `align_sentences` run over all pairs, after a warm-up on the first few."""
    if warmup:
        align_sentences(
            trained,
            sources[:warmup],
            targets[:warmup],
            method,
            device=device,
            batch_size=batch_size,
        )
    start = time.perf_counter()
    result = align_sentences(
        trained, sources, targets, method, device=device, batch_size=batch_size
    )
    seconds = time.perf_counter() - start
    return {
        "method": result.label,
        "pairs": len(sources),
        "seconds": round(seconds, 3),
        "pairs_per_second": round(len(sources) / seconds, 1),
        "links": sum(len(links) for links in result.links),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--src", type=Path)
    parser.add_argument("--tgt", type=Path)
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--methods", default="attention,shift-att")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warmup", type=int, default=64)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    methods = args.methods.split(",")
    try:
        if (args.src is None) != (args.tgt is None):
            raise UserError("--src and --tgt go together")
        unknown = sorted(set(methods) - set(ALIGNMENT_METHODS))
        if unknown:
            raise UserError(f"unknown --methods {unknown}; valid: {', '.join(ALIGNMENT_METHODS)}")
        start = time.perf_counter()
        trained = load_trained_model(args.checkpoint)
        load_seconds = time.perf_counter() - start
        sources, targets = read_pairs(trained, args.src, args.tgt, args.pairs)
        device = resolve_device(args.device)
        rows = [
            time_method(
                trained, sources, targets, AlignmentMethod(name), device, args.batch_size,
                min(args.warmup, len(sources)),
            )
            for name in methods
        ]  # fmt: skip
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    parameters = sum(p.numel() for p in trained.model.parameters())
    report = {
        "checkpoint": str(args.checkpoint),
        "model": f"{type(trained.model).__name__}, {parameters:,} parameters",
        "load_seconds": round(load_seconds, 3),
        "threads": torch.get_num_threads(),
        "device": str(device),
        "batch_size": args.batch_size,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "results": rows,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
