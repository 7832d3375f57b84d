"""Time and peak memory of one forward + backward pass of encoder self-attention, per attention
kind and sequence length n.

One multi-head self-attention layer (d_model 256, 4 heads, batch 1, a key padding mask as the
encoder passes it) runs on x (1, n, d_model) with requires_grad, and `out.sum().backward()`.
Kinds are those of `model.attention.kind`, plus `full_explicit`: full attention through the
explicit path (softmax(Q K^T / sqrt(d_k)) materialised, as with need_weights=True). `full` is
the model's training path, torch's fused scaled_dot_product_attention.

Memory: every (kind, n) runs in a fresh subprocess. After building the layer and inputs (and a
warm-up pass at n = 64), the process resets its peak resident set size (writing 5 to
/proc/self/clear_refs), runs one forward + backward and reports VmHWM - VmRSS: the largest amount
of memory the pass itself held at once (activations, saved tensors, gradients). Time: the best of
--repeats passes, that one included (the minimum is the least disturbed by other processes;
passes stop early once they add up to --max-seconds).

Sizes that would not fit are not run: from the previous size's measurement, the next one is
predicted assuming quadratic growth (4x memory and time per doubling); if the prediction exceeds
--max-gb or --max-seconds the size is reported as skipped. The subprocess also runs under an
address-space limit, so an allocation beyond the budget fails there instead of exhausting the
machine's memory.

Usage (about 15 minutes on one CPU thread):
    nice -n 19 python benchmarks/benchmark_attention_scaling.py --out-dir docs
    python benchmarks/benchmark_attention_scaling.py --sizes 256,512 --kinds full,linear  # quick

Outputs: JSON on stdout (and --json FILE), a markdown table (--out-dir/attention_scaling.md)
and a log-log plot of time and memory against n (--out-dir/attention_scaling.png).
"""

import argparse
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from attnseq.config.choices import AttentionKind

# every `model.attention.kind` (new kinds join automatically), and full's explicit path
KINDS = ("full", "full_explicit", *(kind.value for kind in AttentionKind if kind.value != "full"))
LINEAR_CLAIM = ("local", "linformer", "linear", "performer", "bigbird")  # memory should grow like n
SIZES = tuple(256 * 2**i for i in range(7))  # 256 .. 16384


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated n")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--window", type=int, default=64, help="local/longformer half-width w")
    parser.add_argument("--global-tokens", type=int, default=16, help="longformer g")
    parser.add_argument("--stride", type=int, default=64, help="strided l")
    parser.add_argument("--proj-dim", type=int, default=256, help="linformer k")
    parser.add_argument("--features", type=int, default=256, help="performer m")
    # bigbird: the paper's ITC setting (Zaheer et al. 2020, appendix E): b = 64, a 3-block
    # window, 2 global blocks, 3 random blocks
    parser.add_argument("--block-size", type=int, default=64, help="bigbird b")
    parser.add_argument("--window-blocks", type=int, default=1, help="bigbird w (each side)")
    parser.add_argument("--global-blocks", type=int, default=2, help="bigbird g")
    parser.add_argument("--random-blocks", type=int, default=3, help="bigbird r")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per size")
    parser.add_argument("--max-gb", type=float, default=12.0, help="memory budget per run")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="time budget per pass")
    parser.add_argument("--out-dir", type=Path, default=None, help="write the .md and .png here")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------------- worker
def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    assert match, field
    return int(match.group(1))


def run_worker(kind: str, length: int, args: argparse.Namespace) -> dict:
    """Build one layer, measure one pass's peak memory and the best time of a few passes."""
    budget = int(args.max_gb * 2**30)
    virtual = _status_kib("VmSize") * 1024
    resource.setrlimit(resource.RLIMIT_AS, (virtual + budget + 2**30, resource.RLIM_INFINITY))

    import torch

    from attnseq.attention.efficient import build_self_attention
    from attnseq.attention.multihead import MultiHeadAttention
    from attnseq.config.choices import AttentionKind
    from attnseq.config.schema import AttentionConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    need_weights = kind == "full_explicit"
    if kind in ("full", "full_explicit"):
        layer = MultiHeadAttention(args.d_model, args.heads)
    else:
        options = AttentionConfig(
            kind=AttentionKind(kind),
            D=args.window,
            stride=args.stride,
            global_tokens=args.global_tokens,
            proj_dim=args.proj_dim,
            features=args.features,
            block_size=args.block_size,
            window_blocks=args.window_blocks,
            global_blocks=args.global_blocks,
            random_blocks=args.random_blocks,
        )
        # a linformer is built for the length it serves
        layer = build_self_attention(options, args.d_model, args.heads, max_length=length)

    def one_pass(n: int) -> None:
        x = torch.randn(1, n, args.d_model, requires_grad=True)  # (B, S, d_model)
        mask = torch.ones(1, n, dtype=torch.bool)  # (B, S) key padding mask, as the encoder
        out, _ = layer(x, x, x, mask, need_weights=need_weights)
        out.sum().backward()
        layer.zero_grad(set_to_none=True)

    one_pass(64)  # warm-up: library initialisation is not the attention's memory
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM) to now
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    one_pass(length)
    first = time.perf_counter() - start
    peak = _status_kib("VmHWM") - before
    times = [first]
    for _ in range(args.repeats - 1):
        if sum(times) > args.max_seconds:
            break
        start = time.perf_counter()
        one_pass(length)
        times.append(time.perf_counter() - start)
    return {"kind": kind, "n": length, "seconds": min(times), "peak_mb": peak / 1024}


# ------------------------------------------------------------------------------------ driver
SHAPE_OPTIONS = ("d_model", "heads", "window", "global_tokens", "stride", "proj_dim")


def measure(kind: str, length: int, args: argparse.Namespace) -> dict:
    """Run one worker subprocess; a failure (e.g. out of memory) is reported, not raised."""
    command = [sys.executable, __file__, "--worker", kind, str(length)]
    for name in (*SHAPE_OPTIONS, "block_size", "window_blocks", "global_blocks", "random_blocks"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--features", str(args.features), "--threads", str(args.threads)]
    command += ["--repeats", str(args.repeats), "--max-gb", str(args.max_gb)]
    command += ["--max-seconds", str(args.max_seconds)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"kind": kind, "n": length, "skipped": f"failed: {last[:200]}"}
    return json.loads(result.stdout)


def run_all(args: argparse.Namespace) -> list[dict]:
    sizes = sorted(int(size) for size in args.sizes.split(","))
    kinds = args.kinds.split(",")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; valid: {', '.join(KINDS)}")
    results = []
    for kind in kinds:
        previous: dict | None = None
        for length in sizes:
            reason = None
            if previous is not None and "skipped" in previous:
                reason = previous["skipped"]
            elif previous is not None:
                growth = (length / previous["n"]) ** 2  # assume quadratic: the cautious side
                if previous["peak_mb"] * growth > args.max_gb * 1024:
                    reason = f"predicted > {args.max_gb:g} GB"
                elif previous["seconds"] * growth > args.max_seconds:
                    reason = f"predicted > {args.max_seconds:g} s per pass"
            row = {"kind": kind, "n": length, "skipped": reason} if reason else None
            row = row or measure(kind, length, args)
            print(json.dumps(row), file=sys.stderr, flush=True)
            results.append(row)
            previous = row
    return results


def slope(rows: list[dict], key: str, smallest: int = 2048) -> float | None:
    """Least-squares exponent p of value ~ n^p over the measured sizes >= `smallest`."""
    points = [
        (math.log(row["n"]), math.log(row[key]))
        for row in rows
        if "skipped" not in row and row["n"] >= smallest and row[key] > 0
    ]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return covariance / sum((x - mean_x) ** 2 for x, _ in points)


def summary(results: list[dict]) -> dict:
    """Growth exponents per kind and the n = 8192 memory ratios to full attention."""
    kinds = list(dict.fromkeys(row["kind"] for row in results))
    by_kind = {kind: [row for row in results if row["kind"] == kind] for kind in kinds}
    exponents = {
        kind: {"memory": slope(rows, "peak_mb"), "time": slope(rows, "seconds")}
        for kind, rows in by_kind.items()
    }
    at_8192 = {
        row["kind"]: row["peak_mb"] for row in results if row["n"] == 8192 and "peak_mb" in row
    }
    ratios = {}
    for reference in ("full", "full_explicit"):
        if reference in at_8192:
            ratios[reference] = {
                kind: mb / at_8192[reference] for kind, mb in at_8192.items() if kind != reference
            }
    return {"exponents": exponents, "memory_ratio_at_8192": ratios}


def markdown(results: list[dict], info: dict, stats: dict) -> str:
    kinds = list(dict.fromkeys(row["kind"] for row in results))
    sizes = sorted({row["n"] for row in results})
    cell = {(row["kind"], row["n"]): row for row in results}
    lines = [
        f"Machine: {info['machine']}; torch {info['torch']}, {info['threads']} thread(s); "
        f"{info['date']}. One forward + backward of encoder self-attention: d_model "
        f"{info['d_model']}, {info['heads']} heads, batch 1; local/longformer w = "
        f"{info['window']}, longformer g = {info['global_tokens']}, strided l = {info['stride']}, "
        f"linformer k = {info['proj_dim']}, performer m = {info['features']}, bigbird b = "
        f"{info['block_size']}, w = {info['window_blocks']}, g = {info['global_blocks']}, "
        f"r = {info['random_blocks']}. Load average "
        f"{info['load_average_1min']['start']:.1f} at the start, "
        f"{info['load_average_1min']['end']:.1f} at the end.",
        "",
        "Time (ms, best of the passes) / peak memory (MB) per pass:",
        "",
        "| n | " + " | ".join(kinds) + " |",
        "|---:|" + "---:|" * len(kinds),
    ]
    for size in sizes:
        cells = []
        for kind in kinds:
            row = cell.get((kind, size))
            if row is None or "skipped" in row:
                cells.append("skipped" if row is None else f"skipped ({row['skipped']})")
            else:
                cells.append(f"{1000 * row['seconds']:.0f} / {row['peak_mb']:.0f}")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")

    def exponent(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines += [
        "",
        "Growth exponent p (value ~ n^p, least squares over the measured n >= 2048):",
        "",
        "| | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
        "| memory | " + " | ".join(exponent(stats["exponents"][k]["memory"]) for k in kinds) + " |",
        "| time | " + " | ".join(exponent(stats["exponents"][k]["time"]) for k in kinds) + " |",
    ]
    for reference, ratios in stats["memory_ratio_at_8192"].items():
        described = ", ".join(f"{kind} {ratio:.3g}" for kind, ratio in ratios.items())
        lines += ["", f"Peak memory at n = 8192 relative to {reference}: {described}."]
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 5), layout="constrained")
    axes = figure.subplots(1, 2)
    kinds = list(dict.fromkeys(row["kind"] for row in results))
    for ax, key, label in (
        (axes[0], "seconds", "time per forward + backward (s)"),
        (axes[1], "peak_mb", "peak memory per pass (MB)"),
    ):
        for kind in kinds:
            rows = [r for r in results if r["kind"] == kind and "skipped" not in r]
            if rows:
                style = "--" if kind.startswith("full") else "-"
                sizes, values = [r["n"] for r in rows], [r[key] for r in rows]
                ax.plot(sizes, values, style, marker="o", label=kind)
        measured = [r for r in results if "skipped" not in r]
        if measured:  # guides through the smallest value at the smallest n: slopes 1 and 2
            low = min(measured, key=lambda r: (r["n"], r[key]))
            sizes = sorted({r["n"] for r in results})
            for power, name in ((1, "~ n"), (2, "~ n^2")):
                guide = [low[key] * (size / low["n"]) ** power for size in sizes]
                ax.plot(sizes, guide, ":", color="grey", linewidth=1)
                ax.annotate(name, (sizes[-1], guide[-1]), fontsize=8, color="grey")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8)
    figure.suptitle("Encoder self-attention: one forward + backward, d_model 256, 4 heads, CPU")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def machine_info(args: argparse.Namespace, load_before: float) -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.MULTILINE)
        cpu = match.group(1) if match else cpu
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "machine": f"{cpu}, {os.cpu_count()} cores, {memory_gb:.0f} GB RAM, {platform.system()}",
        "torch": torch.__version__,
        "date": date.today().isoformat(),
        "load_average_1min": {"start": load_before, "end": os.getloadavg()[0]},
        **{
            key: getattr(args, key)
            for key in (
                "threads",
                "d_model",
                "heads",
                "window",
                "global_tokens",
                "stride",
                "proj_dim",
                "features",
                "block_size",
                "window_blocks",
                "global_blocks",
                "random_blocks",
            )
        },
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        kind, length = args.worker
        print(json.dumps(run_worker(kind, int(length), args)))
        return
    load_before = os.getloadavg()[0]
    results = run_all(args)
    info = machine_info(args, load_before)
    stats = summary(results)
    report = {"info": info, "results": results, **stats}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.out_dir:
        (args.out_dir / "attention_scaling.md").parent.mkdir(parents=True, exist_ok=True)
        (args.out_dir / "attention_scaling.md").write_text(markdown(results, info, stats))
        plot(results, args.out_dir / "attention_scaling.png")


if __name__ == "__main__":
    main()
