"""Decoding speed and BLEU of attnseq against CTranslate2 (float32 and int8) for one
transformer checkpoint: greedy and beam search at batch sizes 64 and 1, end to end as
`attnseq translate` runs (tokenize, batch by length, decode, detokenize), on the checkpoint's
test split (Multi30k: test2016). Exports the checkpoint itself (`attnseq export --to
ctranslate2`). Prints one JSON object.

Usage (from the repository root):

    # a Multi30k transformer (attnseq train config=multi30k_transformer), on the GPU
    .venv/bin/python benchmarks/benchmark_ct2.py outputs/DATE/TIME/checkpoints/best.pt \\
        --device cuda

    # on the CPU, 4 threads for both engines, 200 sentences per setting
    .venv/bin/python benchmarks/benchmark_ct2.py best.pt --device cpu --threads 4 --sentences 200

Options: --device cpu|cuda|auto, --threads N (torch intra-op threads and the engine's
intra_threads), --beam K (default 5), --batch-sizes 64,1, --sentences N (default: the whole
split), --length-penalty A (default 0: both searches then rank by log P, see
decoding/ctranslate2_engine.py), --compute-types float32,int8, --export-dir DIR (default: a
temporary folder).

Every row has sentences/s, output tokens/s, corpus BLEU (sacreBLEU, its signature in the report)
and `same_as_attnseq`, the share of outputs identical to attnseq's at the same setting.
"""

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import attnseq
from attnseq.data.sources import load_splits
from attnseq.decoding import DecodingConfig
from attnseq.errors import UserError
from attnseq.evaluation.metrics import bleu


def time_engine(
    engine: Any, sources: list[str], settings: DecodingConfig, batch_size: int
) -> tuple[list[str], dict[str, Any]]:
    """Outputs and speed of decoding `sources` once with `engine` (after a short warm-up)."""
    list(engine.translate(sources[: min(4, len(sources))], settings, batch_size))  # warm-up
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    nbest_lists = list(engine.hypotheses(sources, settings, batch_size, len(sources)))
    outputs = [
        engine.tokenizers.tgt.decode(nbest[0].tokens) if nbest else "" for nbest in nbest_lists
    ]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens = sum(len(nbest[0].tokens) + 1 for nbest in nbest_lists if nbest)  # + EOS
    return outputs, {
        "sentences": len(sources),
        "seconds": round(seconds, 4),
        "sentences_per_second": round(len(sources) / seconds, 2),
        "output_tokens_per_second": round(tokens / seconds, 1),
    }


def engines(args: argparse.Namespace, export_dir: Path) -> list[tuple[str, Any]]:
    """attnseq's Translator and one CTranslate2 translator per compute type."""
    from attnseq.decoding.ctranslate2_engine import CTranslate2Translator
    from attnseq.models.ctranslate2_export import export_ctranslate2

    ours = attnseq.load(args.checkpoint, args.device).translator
    folder = export_ctranslate2(args.checkpoint, export_dir, force=True)
    device = ours.device.type
    chosen: list[tuple[str, Any]] = [("attnseq", ours)]
    for compute_type in args.compute_types.split(","):
        chosen.append(
            (
                f"ctranslate2-{compute_type}",
                CTranslate2Translator(folder, device, compute_type, threads=args.threads or 0),
            )
        )
    return chosen


def run(args: argparse.Namespace, export_dir: Path) -> dict[str, Any]:
    models = engines(args, export_dir)
    ours = models[0][1]
    pairs = [pair for pair in load_splits(ours.cfg.data, ours.cfg.seed)["test"] if pair[0].strip()]
    pairs = pairs[: args.sentences] if args.sentences else pairs
    sources, references = [src for src, _ in pairs], [tgt for _, tgt in pairs]
    base = ours.settings(length_penalty=args.length_penalty)
    rows, signature = [], ""
    for search, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        settings = replace(base, beam=beam, nbest=1)
        for batch_size in [int(size) for size in args.batch_sizes.split(",")]:
            reference_outputs: list[str] = []
            for name, engine in models:
                outputs, row = time_engine(engine, sources, settings, batch_size)
                reference_outputs = reference_outputs or outputs  # attnseq's come first
                score, signature = bleu(outputs, references)
                same = sum(a == b for a, b in zip(outputs, reference_outputs, strict=True))
                row = {"engine": name, "search": search, "batch_size": batch_size, **row}
                row["bleu"] = round(score, 2)
                row["same_as_attnseq"] = round(same / len(outputs), 4)
                rows.append(row)
                print(
                    f"{name}: {search} batch {batch_size}: {row['sentences_per_second']} "
                    f"sent/s, BLEU {row['bleu']}",
                    file=sys.stderr,
                )
    return {
        "checkpoint": str(args.checkpoint),
        "device": str(ours.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "length_penalty": args.length_penalty,
        "bleu_signature": signature,
        "results": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", type=Path, help="a transformer checkpoint")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto")
    parser.add_argument("--threads", type=int, help="CPU threads of both engines")
    parser.add_argument("--beam", type=int, default=5, help="beam size compared with greedy")
    parser.add_argument("--batch-sizes", default="64,1", help="comma-separated batch sizes")
    parser.add_argument("--sentences", type=int, help="first N test sentences (default: all)")
    parser.add_argument("--length-penalty", type=float, default=0.0, help="see the docstring")
    parser.add_argument("--compute-types", default="float32,int8", help="CTranslate2 types")
    parser.add_argument("--export-dir", type=Path, help="where to export (default: temporary)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if args.export_dir is not None:
            report = run(args, args.export_dir)
        else:
            with tempfile.TemporaryDirectory(prefix="attnseq-ct2-") as folder:
                report = run(args, Path(folder) / "model")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
