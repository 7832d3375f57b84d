"""The resource estimate against measured peak memory: per attention kind and size, what
`attnseq.config.resources.estimate` says one training step needs, what one training step of
the real model really takes (`attnseq.training.peak_memory.measure_step_peak`: a fresh process,
forward + backward + optimizer step, peak resident memory growth), and their ratio.

Every configuration trains the generated `reverse` task (its vocabulary, hence the output
layer, is known from the config) with sources of exactly data.max_len symbols, so the batch
the estimate assumes is the one measured. Sizes grow the sequence length, the token budget and
the model width together.

Usage (a few minutes on one CPU thread; the largest size needs about 1 GB):
    nice -n 19 python benchmarks/benchmark_memory_estimate.py --out docs/results/memory_estimate.md
    python benchmarks/benchmark_memory_estimate.py --kinds full,bigbird --sizes small  # quick

Prints one line per (kind, size) and writes a markdown table (--out). With --search it
measures instead how many (rows, V) float tensors a search step holds at once over large
vocabularies (`search_step_copies`), the count `SEARCH_VOCAB_COPIES` of the decoding estimates:
    python benchmarks/benchmark_memory_estimate.py --search
"""

import argparse
import platform
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from attnseq.config.conversion import config_from_dict
from attnseq.config.resources import FACTOR, estimate, vocabulary_lower_bound
from attnseq.config.schema import TrainConfig
from attnseq.training.peak_memory import measure_step_peak

MIB = 1024**2
SYMBOLS = 60  # the reverse task's alphabet: a vocabulary of 64 with the special tokens

TRANSFORMER = ["model.family=transformer", "model.dropout=0.1"]
RNN = ["model.family=rnn", "model.rnn.cell=gru"]
# every transformer self-attention kind (and persistent memory, pointer-generator), every RNN
# attention score, window, hierarchy and the pointer-generator with coverage
KINDS: dict[str, list[str]] = {
    "full": TRANSFORMER,
    "memory_slots": [*TRANSFORMER, "model.attention.memory_slots=8"],
    "local": [*TRANSFORMER, "model.attention.kind=local", "model.attention.D=8"],
    "strided": [*TRANSFORMER, "model.attention.kind=strided", "model.attention.stride=8"],
    "longformer": [
        *TRANSFORMER,
        "model.attention.kind=longformer",
        "model.attention.D=8",
        "model.attention.global_tokens=2",
    ],
    "linformer": [*TRANSFORMER, "model.attention.kind=linformer", "model.attention.proj_dim=16"],
    "linear": [*TRANSFORMER, "model.attention.kind=linear"],
    "performer": [*TRANSFORMER, "model.attention.kind=performer", "model.attention.features=32"],
    "performer_causal": [
        *TRANSFORMER,
        "model.attention.kind=performer",
        "model.attention.features=32",
        "model.attention.decoder_self=true",
    ],
    "bigbird": [*TRANSFORMER, "model.attention.kind=bigbird", "model.attention.block_size=8"],
    # no global blocks and blocks of 48: sources of 24, 64 and 128 are padded to 48, 96 and 144
    "bigbird_padded": [
        *TRANSFORMER,
        "model.attention.kind=bigbird",
        "model.attention.block_size=48",
        "model.attention.global_blocks=0",
    ],
    "bigbird_causal": [
        *TRANSFORMER,
        "model.attention.kind=bigbird",
        "model.attention.block_size=8",
        "model.attention.decoder_self=true",
    ],
    "transformer_copy": [*TRANSFORMER, "model.copy=true"],
    "rnn_additive": [*RNN, "model.decoder=bahdanau", "model.attention.score=additive"],
    "rnn_general": [*RNN, "model.decoder=luong", "model.attention.score=general"],
    "rnn_dot": [*RNN, "model.decoder=luong", "model.attention.score=dot"],
    "rnn_location": [*RNN, "model.decoder=luong", "model.attention.score=location"],
    "rnn_local_p": [
        *RNN,
        "model.decoder=luong",
        "model.attention.score=general",
        "model.attention.window=local_p",
    ],
    "rnn_hierarchical": [*RNN, "model.decoder=bahdanau", "model.attention.hierarchy=sentence"],
    "rnn_copy_coverage": [*RNN, "model.decoder=bahdanau", "model.copy=true", "model.coverage=true"],
}


@dataclass(frozen=True)
class Size:
    """Sequence length, token budget and width of one benchmark size."""

    length: int
    max_tokens: int
    width: int

    def overrides(self) -> list[str]:
        return [
            f"data.min_len={self.length}",
            f"data.max_len={self.length}",
            f"data.max_tokens={self.max_tokens}",
            f"model.d_model={self.width}",
            f"model.ff_dim={4 * self.width}",
            f"model.hidden={self.width}",
            f"model.emb_dim={self.width // 2}",
        ]


SIZES = {
    "small": Size(length=24, max_tokens=1024, width=32),
    "medium": Size(length=64, max_tokens=2048, width=64),
    "large": Size(length=128, max_tokens=4096, width=64),
}


def config_for(kind: str, size: Size) -> TrainConfig:
    """The config of one benchmark row."""
    base = [
        "data.name=reverse",
        "data.source=generated",
        f"data.vocab_size={SYMBOLS}",
        "data.train_size=10000",
        "data.valid_size=50",
        "data.test_size=50",
        "model.heads=4",
        "model.enc_layers=2",
        "model.dec_layers=2",
        "model.rnn.layers=1",
        "trainer.device=cpu",
        "trainer.threads=1",
    ]
    return config_from_dict({}, [*base, *size.overrides(), *KINDS[kind]])


@dataclass(frozen=True)
class Row:
    """One measurement: the estimated and the measured bytes of one training step."""

    kind: str
    size: str
    estimated: int
    measured: int

    @property
    def ratio(self) -> float:
        """measured / estimated."""
        return self.measured / self.estimated


def step_estimate(cfg: TrainConfig) -> int:
    """The estimate of one training step: weights, gradients, Adam state and activations."""
    need = estimate(cfg)
    return need.training_bytes + need.activation_bytes


def measure(kind: str, size_name: str) -> Row:
    """Estimate and measure one (kind, size)."""
    cfg = config_for(kind, SIZES[size_name])
    measured = measure_step_peak(cfg, vocabulary_lower_bound(cfg))
    return Row(kind, size_name, step_estimate(cfg), measured)


# (vocabulary, beam) of the search-step measurements: NLLB's vocabulary and a smaller one
SEARCHES = [(256_206, 4), (256_206, 1), (64_000, 5)]
SEARCH_SENTENCES = 32


def search_step_copies(vocab: int, beam: int, sentences: int = SEARCH_SENTENCES) -> float:
    """How many (rows, V) float tensors a search over a `vocab`-token vocabulary holds at its
    peak: the peak resident growth of one decoding of `sentences` sentences with `beam` (after
    a first one that grows the allocator's pools), over rows x V x 4 bytes. A transformer of
    width 16 makes the vocabulary nearly all of it; min_length keeps every row alive."""
    import torch

    from attnseq.decoding import decode
    from attnseq.models.loading import build_model
    from attnseq.models.seq2seq import Vocabularies
    from attnseq.training.peak_memory import release_freed_memory, reset_peak, status_bytes

    keys = ["model.family=transformer", "model.d_model=16", "model.heads=2", "model.ff_dim=16"]
    keys += ["model.enc_layers=1", "model.dec_layers=1", "decoding.max_output_ratio=0"]
    keys += ["decoding.max_output_extra=5", "decoding.min_length=5", f"decoding.beam={beam}"]
    cfg = config_from_dict({}, keys)
    model = build_model(cfg.model, Vocabularies(vocab, vocab, 0, 2, 3)).eval()
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (sentences, 10), generator=generator)  # (B, S)
    lengths = torch.full((sentences,), 10)
    with torch.inference_mode():
        decode(model, src, lengths, cfg.decoding)
        release_freed_memory()
        before = status_bytes("VmRSS")
        reset_peak()
        decode(model, src, lengths, cfg.decoding)
        grown = status_bytes("VmHWM") - before
    return grown / (sentences * beam * vocab * 4)


def markdown(rows: list[Row]) -> str:
    """The docs page: the table and how it was made."""
    lines = [
        "# Memory estimate against measured peak",
        "",
        "`attnseq train` refuses, before any work, a configuration whose estimated memory does "
        "not fit the machine (`attnseq/config/resources.py`). This table compares that estimate "
        "of one training step (weights, gradients, Adam state and the activations of the "
        "largest batch) with the peak resident memory one training step of the real model "
        "really adds to a fresh process (forward, backward and optimizer step; "
        "`attnseq/training/peak_memory.py`).",
        "",
        f"The estimate is within a factor {FACTOR:g} of the measurement for every attention "
        "kind at every size (tests/config/test_resources.py holds it there); in this table "
        f"measured / estimated runs from {min(r.ratio for r in rows):.2f} to "
        f"{max(r.ratio for r in rows):.2f}.",
        "",
        "Sizes (generated `reverse` task, vocabulary 64, 2 + 2 layers, 4 heads):",
        "",
        "| size | sequence length | data.max_tokens | d_model = hidden |",
        "|---|---:|---:|---:|",
    ]
    for name, size in SIZES.items():
        lines.append(f"| {name} | {size.length} | {size.max_tokens} | {size.width} |")
    lines += [
        "",
        "Kinds (the keys each one sets; transformer kinds on `model.family=transformer`, "
        "`rnn_*` on a bidirectional GRU encoder):",
        "",
        "| kind | keys |",
        "|---|---|",
    ]
    for kind, keys in KINDS.items():
        own = [key for key in keys if key not in TRANSFORMER and key not in RNN]
        lines.append(f"| {kind} | {', '.join(f'`{key}`' for key in own) or '(defaults)'} |")
    lines += [
        "",
        "| kind | size | estimated MiB | measured MiB | measured / estimated |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.kind} | {row.size} | {row.estimated / MIB:.1f} | "
            f"{row.measured / MIB:.1f} | {row.ratio:.2f} |"
        )
    lines += [
        "",
        "The terms of the estimate, per attention kind, are listed in "
        "`attnseq/config/resources.py`. A BigBird block longer than the longest source "
        "(`model.attention.block_size` > `data.max_src_len`) is refused by the config check "
        "itself: every sequence would be one padded block, which is full attention.",
        "",
        f"Measured on {date.today().isoformat()}, {platform.machine()}, Python "
        f"{platform.python_version()}, one CPU thread, with "
        "`python benchmarks/benchmark_memory_estimate.py --out docs/results/memory_estimate.md`.",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated sizes")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument(
        "--search", action="store_true", help="measure a search step's (rows, V) copies instead"
    )
    args = parser.parse_args(argv)
    for option, given, valid in (("--kinds", args.kinds, KINDS), ("--sizes", args.sizes, SIZES)):
        unknown = [name for name in given.split(",") if name not in valid]
        if unknown:
            parser.error(f"{option}: unknown {', '.join(unknown)}; valid: {', '.join(valid)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.search:  # resources.SEARCH_VOCAB_COPIES is at most the fewest of these
        for vocab, beam in SEARCHES:
            copies = search_step_copies(vocab, beam)
            print(f"vocabulary {vocab:,} beam {beam}: {copies:.2f} (rows, V) copies", flush=True)
        return 0
    rows = []
    for kind in args.kinds.split(","):
        for size in args.sizes.split(","):
            row = measure(kind, size)
            rows.append(row)
            print(
                f"{row.kind:18} {row.size:7} estimated {row.estimated / MIB:8.1f} MiB  "
                f"measured {row.measured / MIB:8.1f} MiB  ratio {row.ratio:.2f}",
                flush=True,
            )
    if args.out is not None:
        args.out.write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
