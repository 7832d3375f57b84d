"""Decoding speed: sentences per second for greedy decoding and beam search (beam 5 by default)
at batch sizes 1 and 64, end to end as `attnseq translate` runs (tokenize, batch by length,
decode, detokenize). Trains nothing. Prints one JSON object.

Usage (from the repository root):

    # trained checkpoints: pass one of each family to compare them (any number of paths)
    .venv/bin/python benchmarks/benchmark_decoding.py \\
        outputs/A/checkpoints/best.pt outputs/B/checkpoints/best.pt
    #   e.g. A from `attnseq train config=reverse_rnn_bahdanau` (RNN),
    #        B from `attnseq train config=reverse_transformer` (transformer)

    # sources from a file (one per line) instead of the checkpoint's own test split
    .venv/bin/python benchmarks/benchmark_decoding.py best.pt --source test.de --sentences 500

    # no checkpoint: tiny UNTRAINED models of each family (GRU + Bahdanau, GRU + Luong,
    # transformer) with the test suite's tiny sizes, on the generated `reverse` task. They
    # measure the decoding machinery only, not a real model: untrained, greedy outputs mostly
    # run to the length limit (1.5 * source length + 10 tokens), while beam search, which
    # ranks finished hypotheses, may stop earlier; compare rows by `output_tokens_per_second`
    # as well as sentences per second (`mean_output_tokens` says how much each produced).
    .venv/bin/python benchmarks/benchmark_decoding.py --threads 1

    # threads on a busy machine: attnseq's default against 1 and 2 threads, idle and beside
    # a competing 2-thread job (started a minute before, as a job already running would be),
    # the table written for the docs
    .venv/bin/python benchmarks/benchmark_decoding.py RUN/checkpoints/best.pt \\
        --threads default,1,2 --loaded --markdown threads.md

Options: --threads LIST (thread settings compared: "default" is attnseq's default at the time
the setting is timed, attnseq/models/loading.py; or a number), --loaded (time everything again
beside a competing job of --load-threads threads, started --load-warmup seconds early),
--markdown FILE (the table: idle and loaded sentences/s and their ratio), --device
cpu|cuda|auto, --beam K, --batch-sizes 1,64, --sentences N (inputs timed per setting; default
128), --length-penalty A.

Every result row says whether the model was trained (`untrained: true` for the built-in tiny
models). Each setting is warmed up on a few sentences before it is timed.
"""

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import attnseq
from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.devices import resolve_device
from attnseq.config.schema import TrainConfig
from attnseq.config.threads import usable_cores, use_threads
from attnseq.data.sources import load_splits
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.decoding import DecodingConfig
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write_text
from attnseq.models.loading import model_for

# the tiny sizes of tests/helpers.py:tiny_config, on the reverse task
TINY = [
    "data.name=reverse",
    "data.tokenizer=word",
    "data.train_size=300",
    "data.valid_size=20",
    "data.test_size=200",
    "model.emb_dim=16",
    "model.hidden=32",
    "model.d_model=32",
    "model.heads=2",
    "model.enc_layers=1",
    "model.dec_layers=1",
    "model.ff_dim=64",
    "model.dropout=0.0",
]
FAMILIES = {
    "untrained tiny GRU + Bahdanau": ["model.family=rnn", "model.decoder=bahdanau"],
    "untrained tiny GRU + Luong (general)": [
        "model.family=rnn",
        "model.decoder=luong",
        "model.attention.score=general",
    ],
    "untrained tiny transformer": ["model.family=transformer"],
}


def untrained_translators(device: torch.device) -> list[tuple[str, Translator, list[str]]]:
    """Tiny untrained models of each family, with sources from the generated test split."""
    translators = []
    for label, overrides in FAMILIES.items():
        cfg = config_from_dict(config_to_dict(TrainConfig()), TINY + overrides)
        splits = load_splits(cfg.data, cfg.seed)
        tokenizers = TokenizerPair(
            train_tokenizer("word", (src for src, _ in splits["train"])),
            train_tokenizer("word", (tgt for _, tgt in splits["train"])),
        )
        torch.manual_seed(cfg.seed)
        model = model_for(cfg, tokenizers)
        sources = [src for src, _ in splits["test"]]
        translators.append((label, Translator(model, tokenizers, cfg, device), sources))
    return translators


def checkpoint_translator(
    path: Path, device: str, source: Path | None
) -> tuple[str, Translator, list[str]]:
    translator = attnseq.load(path, device, threads=1).translator
    if source is not None:
        sources = [line.rstrip("\n") for line in source.open(encoding="utf-8")]
    else:
        sources = [src for src, _ in load_splits(translator.cfg.data, translator.cfg.seed)["test"]]
    return str(path), translator, [line for line in sources if line.strip()]


def time_setting(
    translator: Translator, sources: list[str], settings: DecodingConfig, batch_size: int
) -> dict[str, Any]:
    """Sentences/s and output tokens/s for decoding `sources` once (after a warm-up)."""
    list(translator.translate(sources[: min(4, len(sources))], settings, batch_size))  # warm-up
    start = time.perf_counter()
    outputs = list(translator.hypotheses(sources, settings, batch_size, len(sources)))
    texts = [translator.tokenizers.tgt.decode(nbest[0].tokens) for nbest in outputs if nbest]
    seconds = time.perf_counter() - start
    tokens = sum(len(nbest[0].tokens) + 1 for nbest in outputs if nbest)  # + EOS
    assert len(texts) == len(sources)
    return {
        "sentences": len(sources),
        "seconds": round(seconds, 4),
        "sentences_per_second": round(len(sources) / seconds, 2),
        "output_tokens_per_second": round(tokens / seconds, 1),
        "mean_output_tokens": round(tokens / len(sources), 2),
    }


# A competing job: float32 matrix products on N threads, as another training would keep the
# cores busy (the "loaded" condition). It runs until the benchmark stops it.
COMPETITOR = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
a = torch.randn(384, 384)
while True:
    a = torch.tanh(a @ a)
"""


@contextlib.contextmanager
def competing_job(threads: int, warmup: float) -> Iterator[None]:
    """A second process keeping `threads` cores busy while the block runs; started `warmup`
    seconds early, so that the 1-minute load average (which attnseq's default thread count
    reads) has seen it, as it would have seen a job that was already running."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-c", COMPETITOR, str(threads)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    try:
        time.sleep(warmup)
        yield
    finally:
        process.kill()
        process.wait()


def thread_count(setting: str) -> int:
    """Set torch's threads for `setting` ("default": attnseq's default now, or a number)."""
    return use_threads(None if setting == "default" else int(setting))


def time_models(
    models: list[tuple[str, Translator, list[str]]], args: argparse.Namespace, condition: str
) -> list[dict[str, Any]]:
    """One row per model, thread setting, search and batch size."""
    rows = []
    for label, translator, sources in models:
        sources = sources[: args.sentences]
        base = translator.settings(length_penalty=args.length_penalty)
        for setting in args.thread_settings.split(","):
            threads = thread_count(setting)
            for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
                settings = DecodingConfig(**{**vars(base), "beam": beam})
                for batch_size in [int(size) for size in args.batch_sizes.split(",")]:
                    row = {
                        "model": label,
                        "untrained": not args.checkpoints,
                        "family": translator.cfg.model.family.value,
                        "parameters": sum(p.numel() for p in translator.model.parameters()),
                        "condition": condition,
                        "thread_setting": setting,
                        "threads": threads,
                        "search": name,
                        "batch_size": batch_size,
                    }
                    row.update(time_setting(translator, sources, settings, batch_size))
                    rows.append(row)
                    print(
                        f"{label} [{condition}, threads {setting}={threads}]: {name} batch "
                        f"{batch_size}: {row['sentences_per_second']} sent/s",
                        file=sys.stderr,
                    )
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """Sentences/s per model, thread setting, search and batch: idle, loaded (when measured)
    and their ratio."""
    keys = ("model", "thread_setting", "search", "batch_size")
    table: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in rows:
        table.setdefault(tuple(row[key] for key in keys), {})[row["condition"]] = row
    lines = [
        "| model | threads | search | batch | idle sent/s | loaded sent/s | idle / loaded |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for (model, setting, search, batch), conditions in table.items():
        idle, loaded = conditions.get("idle"), conditions.get("loaded")
        threads = " / ".join(
            str(row["threads"]) for row in (idle, loaded) if row is not None
        )  # what the setting gave in each condition
        cells = [f"{row['sentences_per_second']:,.0f}" if row else "" for row in (idle, loaded)]
        ratio = ""
        if idle and loaded:
            ratio = f"{idle['sentences_per_second'] / loaded['sentences_per_second']:.2f}x"
        label = f"{setting} ({threads})"
        lines.append(f"| {Path(model).name} | {label} | {search} | {batch} | {cells[0]} | "
                     f"{cells[1]} | {ratio} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checkpoints", nargs="*", type=Path, help="checkpoints (default: tiny untrained models)"
    )
    parser.add_argument("--source", type=Path, help="source sentences, one per line")
    parser.add_argument("--sentences", type=int, default=128, help="sentences timed per setting")
    parser.add_argument("--threads", dest="thread_settings", default="default",
                        help="comma-separated thread settings to compare: default (attnseq's "
                        "default when the setting is timed) or a number")  # fmt: skip
    parser.add_argument("--loaded", action="store_true",
                        help="also time everything beside a competing job")  # fmt: skip
    parser.add_argument("--load-threads", type=int, default=2, help="the competing job's threads")
    parser.add_argument("--load-warmup", type=float, default=60.0,
                        help="seconds the competing job runs before timing starts")  # fmt: skip
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    parser.add_argument("--beam", type=int, default=5, help="beam size compared with greedy")
    parser.add_argument("--length-penalty", type=float, default=1.0, help="GNMT alpha")
    parser.add_argument("--batch-sizes", default="1,64", help="comma-separated batch sizes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        if args.checkpoints:
            models = [
                checkpoint_translator(path, args.device, args.source) for path in args.checkpoints
            ]
        else:
            models = untrained_translators(resolve_device(args.device))
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    results = time_models(models, args, "idle")
    if args.loaded:
        with competing_job(args.load_threads, args.load_warmup):
            results += time_models(models, args, "loaded")
    report = {
        "torch": torch.__version__,
        "cores": usable_cores(),
        "load_average_before": round(load_before, 2),
        "competing_job_threads": args.load_threads if args.loaded else None,
        "device": str(models[0][1].device) if models else args.device,
        "machine": platform.processor() or platform.machine(),
        "results": results,
    }
    if args.markdown is not None:
        atomic_write_text(args.markdown, markdown_table(results))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
