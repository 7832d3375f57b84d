"""Decoding speed: sentences per second for greedy decoding and beam search (beam 5 by default)
at batch sizes 1 and 64, end to end as `attnseq translate` runs (tokenize, batch by length,
decode, detokenize). Trains nothing. Prints one JSON object.

Usage (from the repository root):

    # trained checkpoints: pass one of each family to compare them (any number of paths)
    .venv/bin/python scripts/benchmark_decoding.py \\
        outputs/A/checkpoints/best.pt outputs/B/checkpoints/best.pt
    #   e.g. A from `attnseq train config=reverse_rnn_bahdanau` (RNN),
    #        B from `attnseq train config=reverse_transformer` (transformer)

    # sources from a file (one per line) instead of the checkpoint's own test split
    .venv/bin/python scripts/benchmark_decoding.py best.pt --source test.de --sentences 500

    # no checkpoint: tiny UNTRAINED models of each family (GRU + Bahdanau, GRU + Luong,
    # transformer) with the test suite's tiny sizes, on the generated `reverse` task. They
    # measure the decoding machinery only, not a real model: untrained, greedy outputs mostly
    # run to the length limit (1.5 * source length + 10 tokens), while beam search, which
    # ranks finished hypotheses, may stop earlier; compare rows by `output_tokens_per_second`
    # as well as sentences per second (`mean_output_tokens` says how much each produced).
    .venv/bin/python scripts/benchmark_decoding.py --threads 1

Options: --threads N (torch intra-op threads), --device cpu|cuda|auto, --beam K,
--batch-sizes 1,64, --sentences N (inputs timed per setting; default 128), --length-penalty A.

Every result row says whether the model was trained (`untrained: true` for the built-in tiny
models). Each setting is warmed up on a few sentences before it is timed.
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.data.sources import load_splits
from attnseq.data.tokenizers import TokenizerPair, train_tokenizer
from attnseq.decoding import DecodingSettings
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.models.loading import model_for, resolve_device

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
    translator = Translator.from_checkpoint(path, device)
    if source is not None:
        sources = [line.rstrip("\n") for line in source.open(encoding="utf-8")]
    else:
        sources = [src for src, _ in load_splits(translator.cfg.data, translator.cfg.seed)["test"]]
    return str(path), translator, [line for line in sources if line.strip()]


def time_setting(
    translator: Translator, sources: list[str], settings: DecodingSettings, batch_size: int
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "checkpoints", nargs="*", type=Path, help="checkpoints (default: tiny untrained models)"
    )
    parser.add_argument("--source", type=Path, help="source sentences, one per line")
    parser.add_argument("--sentences", type=int, default=128, help="sentences timed per setting")
    parser.add_argument("--threads", type=int, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--beam", type=int, default=5, help="beam size compared with greedy")
    parser.add_argument("--length-penalty", type=float, default=1.0, help="GNMT alpha")
    parser.add_argument("--batch-sizes", default="1,64", help="comma-separated batch sizes")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]

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

    results = []
    for label, translator, sources in models:
        sources = sources[: args.sentences]
        base = translator.settings(length_penalty=args.length_penalty)
        for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
            settings = DecodingSettings(**{**vars(base), "beam": beam})
            for batch_size in batch_sizes:
                row = {
                    "model": label,
                    "untrained": not args.checkpoints,
                    "family": translator.cfg.model.family.value,
                    "parameters": sum(p.numel() for p in translator.model.parameters()),
                    "search": name,
                    "batch_size": batch_size,
                }
                row.update(time_setting(translator, sources, settings, batch_size))
                results.append(row)
                print(
                    f"{label}: {name} batch {batch_size}: {row['sentences_per_second']} sent/s",
                    file=sys.stderr,
                )
    report = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": str(models[0][1].device) if models else args.device,
        "machine": platform.processor() or platform.machine(),
        "results": results,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
