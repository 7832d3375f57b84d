"""Training benchmark: tokens/s, MFU, decoding speed and peak memory of attnseq experiment
configs on this machine. Prints one JSON object (progress goes to stderr).

Usage (from the repository root):

    # the default config of `attnseq train` and the same with model=transformer
    .venv/bin/python benchmarks/benchmark.py

    # any setups: each argument is one setup, a space-separated list of overrides
    .venv/bin/python benchmarks/benchmark.py "config=reverse_transformer" "model=rnn_luong" \\
        --steps 50 --threads 2
    .venv/bin/python benchmarks/benchmark.py "config=multi30k_transformer" --device cuda

    # decoding speed and test BLEU of trained models (no training), all 1,000 test2016 sentences
    .venv/bin/python benchmarks/benchmark.py --decode-sentences 1000 \
        --checkpoint outputs/multi30k_transformer/checkpoints/best.pt

Options: --steps N timed updates (default 30) after --warmup W (default 5); --threads N torch
intra-op threads (default 2, as the peer measurements in bench/peers/RESULTS.md); --device D a
torch device (cpu, cuda, cuda:N, mps) or auto; --decode-sentences N test sentences per decoding
setting (default 200); --set KEY=VALUE an override added to every setup.

What is measured, with the definitions of bench/peers/RESULTS.md:

* Training throughput: the model, optimizer, scheduler, data and `Trainer` are built as
  `tasks.run_training` builds them; the timed loop does what `Trainer.fit` does per step
  (collate the next real length-bucketed batch of the shuffled epoch, move it to the device,
  `Trainer.update`: forward, loss, backward, clipping, optimizer and schedule step).
  Validation is left out, as in the peers' runs. Target tokens/s counts real target
  positions (tokens + EOS, no padding: what the loss is taken over, Joey's unit);
  source+target tokens/s adds the real source tokens.
* MFU: model FLOP/s divided by the float32 matmul ceiling of this machine, the median
  GFLOP/s of `torch.mm(a, b, out=c)` on 1024x1024x1024 (RESULTS.md's denominator); the
  4096x256x1024 (FFN-shaped) median is reported too. Model FLOPs are the split estimate:
  6 x encoder parameters per real source token + 6 x decoder parameters (output projection
  included, counted even when tied to the embedding) per real target token. Embedding
  look-ups are free; attention scores/contexts and padding are not counted. RNN attention key
  projections (computed once per source token) count on the source side; the RNN bridge
  (once per sentence) is not counted.
* Decoding: sentences/s of `attnseq.decoding.decode` over the first N test sentences, sorted
  by length and cut into batches of 64 and of 1, greedy and beam 5 (the config's length
  penalty and output limits). The model has only had the benchmark's few updates, so
  outputs tend to run to the length limit: `mean_output_tokens` says how much was produced.
  With --checkpoint the same is measured for a trained model, and each setting's output is
  scored (test BLEU, sacreBLEU on detokenized text); model loading is not timed.
* Memory: peak resident set size of the process (resource.getrusage, after training and at
  the end); on CUDA also torch.cuda.max_memory_allocated for training and for decoding. Each
  setup runs in its own process so one setup's peak does not hide another's.
"""

import argparse
import atexit
import json
import os
import platform
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from attnseq.errors import UserError  # noqa: E402

DEFAULT_SETUPS = ["", "model=transformer"]
MATMUL_SHAPES = [(1024, 1024, 1024), (4096, 256, 1024)]  # M x K x N


# ------------------------------------------------------------------------------ matmul peak
def _sync(device: torch.device) -> None:
    """Wait for the device's queued kernels, so that a clock read after this sees them done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _device(name: str) -> torch.device:
    """The device `--device` names on this machine (UserError when it has none such). A CUDA
    device with an index also becomes the current one, so what the model code allocates on
    plain `cuda` lands on it too."""
    from attnseq.config.devices import resolve_device

    device = resolve_device(name, "--device")
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    return device


def matmul_gflops(
    m: int, k: int, n: int, device: torch.device, reps: int = 7, seconds: float = 0.2
) -> dict[str, float]:
    """Median and best float32 GFLOP/s of `torch.mm(a, b, out=c)` for an (M, K) x (K, N)
    product: each of `reps` repetitions times a loop of about `seconds`."""
    a = torch.randn(m, k, device=device)
    b = torch.randn(k, n, device=device)
    c = torch.empty(m, n, device=device)
    flops = 2.0 * m * k * n
    for _ in range(3):  # warm-up: thread pool, kernel selection
        torch.mm(a, b, out=c)
    _sync(device)
    start = time.perf_counter()
    torch.mm(a, b, out=c)
    _sync(device)
    loops = max(1, int(seconds / max(time.perf_counter() - start, 1e-6)))
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(loops):
            torch.mm(a, b, out=c)
        _sync(device)
        rates.append(flops * loops / (time.perf_counter() - start) / 1e9)
    return {"median": round(statistics.median(rates), 1), "best": round(max(rates), 1)}


def measure_peak(device: torch.device) -> dict[str, Any]:
    shapes = {f"{m}x{k}x{n}": matmul_gflops(m, k, n, device) for m, k, n in MATMUL_SHAPES}
    return {"shapes_MxKxN": shapes, "peak_gflops": shapes["1024x1024x1024"]["median"]}


# --------------------------------------------------------------------------------- config


def compose(overrides: list[str], threads: int):
    """The TrainConfig `attnseq train OVERRIDES` would run, through Hydra's compose API (as
    `attnseq train`'s pre-flight composes it), with `threads` torch threads."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from attnseq.config import CONFIG_DIR
    from attnseq.config.checks import validate
    from attnseq.config.composition import describe_composition_error, rewrite_config_selector
    from attnseq.config.schema import TrainConfig, register_configs

    args = rewrite_config_selector(overrides)  # config=NAME / config=PATH.yaml
    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = OmegaConf.to_object(hydra_compose("train", overrides=args))
    except (HydraException, OmegaConfBaseException, ValueError) as error:
        raise UserError(describe_composition_error(error, args)) from None
    assert isinstance(cfg, TrainConfig)
    cfg.trainer.threads = threads
    validate(cfg)
    return cfg


# ----------------------------------------------------------------------------- model FLOPs
def parameter_split(model: nn.Module) -> dict[str, int]:
    """Parameters per side for the split FLOP estimate (RESULTS.md, "MFU").

    Source side: everything under `encoder.` plus RNN attention key projections
    (`attention.key_proj`, applied once per source token). Free: embedding tables (look-ups)
    and the RNN bridge (once per sentence). Target side: everything else, with the output
    projection counted even where it shares the embedding's weight (it is a real matmul).
    """
    owners = {
        f"{name}.{param_name}" if name else param_name: module
        for name, module in model.named_modules(remove_duplicate=False)  # shared embeddings too
        for param_name, _ in module.named_parameters(recurse=False, remove_duplicate=False)
    }
    split = {"encoder": 0, "decoder": 0, "free": 0}
    for name, param in model.named_parameters(remove_duplicate=False):
        if isinstance(owners[name], nn.Embedding) or name.startswith("bridge."):
            side = "free"
        elif name.startswith("encoder.") or name.startswith("attention.key_proj."):
            side = "encoder"
        else:
            side = "decoder"
        split[side] += param.numel()
    return split


# ------------------------------------------------------------------------------- training
def _memory(device: torch.device) -> dict[str, float]:
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    memory = {"peak_rss_mib": round(rss_kib / 1024, 1)}
    if device.type == "cuda":
        memory["cuda_max_allocated_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return memory


def training_batches(trainer: Any) -> Iterator[tuple[Any, Any]]:
    """(batch, counts) in the order Trainer.fit takes them, epoch after epoch, without end,
    so a benchmark of any length runs on a training split of any size. Each is timed as an
    update of its own (optim.accumulate is left out: it groups the same batches)."""
    epoch = 0
    while True:
        yield from trainer.loader(trainer.sampler.batches(epoch))
        epoch += 1


def _update(trainer: Any, batch: Any, counts: Any) -> Any:
    """One real update (`Trainer.update`: train_step and the schedule's step). Its outcome keeps
    the loss on the device, as in `fit`, so the host does not wait for the update."""
    return trainer.update([(batch, counts)])


def _losses(outcomes: list[Any]) -> list[float | None]:
    """The outcomes' losses (None for a skipped update), read in one wait at the end."""
    from attnseq.training.train_step import StepOutcome

    StepOutcome.read_all(outcomes)
    return [outcome.loss if outcome.applied else None for outcome in outcomes]


def build_trainer(cfg, device: torch.device, validate: bool, max_steps: int | None = None):
    """Data, model, optimizer, scheduler and `Trainer` built as `attnseq train` builds them (no
    checkpoints, no TensorBoard); the scheduler's budget is `max_steps` or the config's.
    Returns (trainer, data, prepare_seconds); the validation evaluator only if `validate`."""
    from attnseq.data.prepare import prepare_data
    from attnseq.evaluation.evaluator import make_evaluator
    from attnseq.models.loading import model_for
    from attnseq.training.optim import LearningRateSchedule, TrainingBudget, build_optimizer
    from attnseq.training.precision import use_tf32
    from attnseq.training.trainer import Trainer

    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()
    data = prepare_data(cfg.data, cfg.seed)
    prepare_seconds = time.perf_counter() - start
    model = model_for(cfg, data.tokenizers).to(device)
    use_tf32(cfg.trainer.tf32, device)  # as run.py sets it for a run
    optimizer = build_optimizer(model, cfg.optim)
    budget = TrainingBudget(cfg.trainer.max_steps if max_steps is None else max_steps)
    schedule = LearningRateSchedule(optimizer, cfg.optim, budget)
    valid = make_evaluator(cfg, data, "valid", device) if validate else None
    run_dir = Path(tempfile.mkdtemp(prefix="attnseq-bench-"))  # the trainer never saves here
    atexit.register(shutil.rmtree, run_dir, ignore_errors=True)  # so it is not left in /tmp
    trainer = Trainer(
        model, optimizer, schedule, cfg, data.examples["train"], valid, run_dir, None, device, {}
    )
    return trainer, data, prepare_seconds


def benchmark_training(cfg, device: torch.device, steps: int, warmup: int, peak: float):
    """Time `steps` real updates after `warmup` ones; returns (results, trainer, data)."""
    trainer, data, prepare_seconds = build_trainer(cfg, device, validate=True)
    model = trainer.model

    stream = training_batches(trainer)
    _losses([_update(trainer, *next(stream)) for _ in range(warmup)])
    _sync(device)
    src_tokens = tgt_tokens = padded = sentences = 0
    update_seconds = 0.0  # in update calls: on a GPU the host's share (launches), not the GPU's
    outcomes = []
    start = time.perf_counter()
    for _ in range(steps):
        batch, counts = next(stream)  # collation is part of a real step's cost, as in fit
        update_start = time.perf_counter()
        outcomes.append(_update(trainer, batch, counts))
        update_seconds += time.perf_counter() - update_start
        src_tokens += counts.src
        tgt_tokens += counts.tgt
        padded += counts.padded
        sentences += batch.size
    _sync(device)
    seconds = time.perf_counter() - start
    losses = _losses(outcomes)

    split = parameter_split(model)
    flops_src, flops_tgt = 6 * split["encoder"], 6 * split["decoder"]
    model_flops = (flops_src * src_tokens + flops_tgt * tgt_tokens) / seconds
    results = {
        "model": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameters_split": split,
        "flops_per_src_token": flops_src,
        "flops_per_tgt_token": flops_tgt,
        "data": {
            "name": cfg.data.name,
            "train_examples": len(data.examples["train"]),
            "max_tokens": cfg.data.max_tokens,
            "prepare_seconds": round(prepare_seconds, 2),
        },
        "train": {
            "warmup_steps": warmup,
            "timed_steps": steps,
            "seconds": round(seconds, 3),
            "update_share": round(update_seconds / seconds, 3),
            "sec_per_step": round(seconds / steps, 4),
            "sentences_per_step": round(sentences / steps, 1),
            "tgt_tokens_per_sec": round(tgt_tokens / seconds, 1),
            "src_tgt_tokens_per_sec": round((src_tokens + tgt_tokens) / seconds, 1),
            "padding_share": round(1 - (src_tokens + tgt_tokens) / padded, 3),
            "model_gflops_per_sec": round(model_flops / 1e9, 2),
            "mfu": round(model_flops / 1e9 / peak, 4),
            "first_loss": _rounded(losses[0]),
            "last_loss": _rounded(losses[-1]),
            "skipped_updates": sum(loss is None for loss in losses),
        },
    }
    return results, trainer, data


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# ------------------------------------------------------------------------------- decoding
def benchmark_decoding(
    cfg, model, data, device: torch.device, sentences: int, score: bool = False
) -> list[dict]:
    """Sentences/s of greedy and beam-5 decoding at batch 64 and 1 on the test split.

    `score`: also the test BLEU (sacreBLEU, detokenized output against the raw references) of
    each setting's output, for a trained model: speed is only worth reporting with quality."""
    from attnseq.data.batching import collate
    from attnseq.decoding import DecodingConfig, decode
    from attnseq.evaluation.metrics import bleu

    count = len(data.examples["test"][:sentences])
    order = sorted(range(count), key=lambda i: len(data.examples["test"][i][0]))  # as translate
    examples = [data.examples["test"][i] for i in order]
    references = [data.pairs["test"][i][1] for i in order]
    model.eval()
    rows = []
    for search, beam in (("greedy", 1), ("beam5", 5)):
        settings = DecodingConfig(
            beam=beam,
            length_penalty=cfg.decoding.length_penalty,
            max_output_ratio=cfg.decoding.max_output_ratio,
            max_output_extra=cfg.decoding.max_output_extra,
        )
        for batch_size in (64, 1):
            groups = [examples[i : i + batch_size] for i in range(0, len(examples), batch_size)]
            batches = [
                collate(
                    group,
                    list(range(len(group))),
                    pad_id=model.pad_id,
                    bos_id=model.bos_id,
                    eos_id=model.eos_id,
                ).to(device)
                for group in groups
            ]
            decode(model, batches[0].src[:1], batches[0].src_lengths[:1], settings)  # warm-up
            _sync(device)
            output_tokens = 0
            outputs: list[list[int]] = []
            start = time.perf_counter()
            with torch.no_grad():
                for batch in batches:
                    for nbest in decode(model, batch.src, batch.src_lengths, settings):
                        output_tokens += len(nbest[0].tokens) + 1  # + EOS
                        outputs.append(nbest[0].tokens)
            _sync(device)
            seconds = time.perf_counter() - start
            quality = {}
            if score:  # detokenizing is not part of the timed decode
                texts = [data.tokenizers.tgt.decode(tokens) for tokens in outputs]
                quality["bleu"], quality["bleu_signature"] = bleu(texts, references)
            rows.append(
                {
                    "search": search,
                    "batch_size": batch_size,
                    "sentences": len(examples),
                    "seconds": round(seconds, 3),
                    "sentences_per_sec": round(len(examples) / seconds, 2),
                    "output_tokens_per_sec": round(output_tokens / seconds, 1),
                    "mean_output_tokens": round(output_tokens / len(examples), 2),
                    **quality,
                }
            )
            print(
                f"  decode {search} batch {batch_size}: {rows[-1]['sentences_per_sec']} sent/s",
                file=sys.stderr,
            )
    return rows


# ---------------------------------------------------------------------------------- setups
def run_setup(setup: str, args: argparse.Namespace, peak: float) -> dict[str, Any]:
    """Everything for one setup, in this process."""
    overrides = shlex.split(setup) + list(args.set or [])
    cfg = compose(overrides, args.threads)
    torch.set_num_threads(args.threads)
    device = _device(args.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    print(f"setup {setup or '(default)'}: training", file=sys.stderr)
    results, trainer, data = benchmark_training(cfg, device, args.steps, args.warmup, peak)
    results = {"setup": setup or "(default config)", "overrides": overrides, **results}
    results["memory_after_training"] = _memory(device)
    print(
        f"  {results['train']['tgt_tokens_per_sec']} target tok/s, "
        f"MFU {100 * results['train']['mfu']:.1f}%",
        file=sys.stderr,
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if args.decode_sentences > 0:  # 0: training figures only
        results["decode"] = benchmark_decoding(
            cfg, trainer.model, data, device, args.decode_sentences
        )
    results["memory_at_end"] = _memory(device)
    return results


def run_checkpoint(path: str, args: argparse.Namespace) -> dict[str, Any]:
    """Decoding figures of a trained checkpoint on its dataset's test split (no training),
    with the test BLEU of each setting's output."""
    from attnseq.data.prepare import prepare_data
    from attnseq.models.loading import load_trained_model

    trained = load_trained_model(Path(path))
    payload, cfg, tokenizers = trained.payload, trained.cfg, trained.tokenizers
    torch.set_num_threads(args.threads)
    device = _device(args.device)
    model = trained.model.to(device)
    data = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=["test"])
    print(f"checkpoint {path}: decoding", file=sys.stderr)
    results: dict[str, Any] = {
        "checkpoint": str(path),
        "name": cfg.name,
        "step": payload.get("progress", {}).get("step"),
        "train_minutes": round(payload.get("progress", {}).get("train_seconds", 0.0) / 60, 2),
        "model": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    results["decode"] = benchmark_decoding(
        cfg, model, data, device, args.decode_sentences, score=True
    )
    results["memory_at_end"] = _memory(device)
    return results


def machine(device: torch.device, threads: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": threads,
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "setups",
        nargs="*",
        help='setups, each a space-separated override list (default: "" and "model=transformer")',
    )
    parser.add_argument("--steps", type=int, default=30, help="timed training updates")
    parser.add_argument("--warmup", type=int, default=5, help="untimed updates first")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument(
        "--device", default="cpu", help="a torch device (cpu, cuda, cuda:N, mps) or auto"
    )
    parser.add_argument(
        "--decode-sentences", type=int, default=200, help="test sentences (0: no decoding)"
    )
    parser.add_argument("--set", action="append", help="KEY=VALUE added to every setup")
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        help="decode with this trained checkpoint (repeatable; no training setups unless given)",
    )
    parser.add_argument("--peak-gflops", type=float, help=argparse.SUPPRESS)  # from the parent
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--steps and --threads must be >= 1 and --warmup >= 0")
    setups = args.setups or ([] if args.checkpoint else DEFAULT_SETUPS)

    try:
        device = _device(args.device)
        if args.single:  # a child: one setup or checkpoint, JSON on stdout
            if args.checkpoint:
                print(json.dumps(run_checkpoint(args.checkpoint[0], args)))
            else:
                print(json.dumps(run_setup(setups[0], args, args.peak_gflops)))
            return 0
        for setup in setups:  # fail early on a typo, before minutes of measuring
            compose(shlex.split(setup) + list(args.set or []), args.threads)
        for path in args.checkpoint:
            if not Path(path).is_file():
                raise UserError(f"--checkpoint {path}: no such file")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    torch.set_num_threads(args.threads)
    print(f"matmul ceiling on {device}, {args.threads} threads", file=sys.stderr)
    matmul = measure_peak(device)
    common = ["--peak-gflops", str(matmul["peak_gflops"]), "--steps", str(args.steps)]
    common += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
    common += ["--device", args.device, "--decode-sentences", str(args.decode_sentences)]
    for item in args.set or []:
        common += ["--set", item]
    # each in its own process, so that the peak RSS is this setup's alone
    children = [(f"setup {setup!r}", [setup, "--single"]) for setup in setups]
    children += [
        (f"checkpoint {path}", ["--checkpoint", path, "--single"]) for path in args.checkpoint
    ]
    results = []
    for label, arguments in children:
        child = subprocess.run(
            [sys.executable, __file__, *arguments, *common], stdout=subprocess.PIPE, text=True
        )
        if child.returncode != 0:
            print(f"error: {label} failed (exit {child.returncode})", file=sys.stderr)
            return child.returncode
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    report = {"machine": machine(device, args.threads), "matmul_gflops": matmul}
    report["results"] = results
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
