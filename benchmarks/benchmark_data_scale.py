"""Corpora of millions of pairs: preparation speed, memory and start-up against corpus size.

For each size (default 0.1M and 1M pairs; `--sizes` adds 5M) the script writes a synthetic
parallel corpus with the length distribution of a real one: every pair is a Multi30k training
pair drawn at random (seeded), its words shuffled on each side, so lengths, vocabulary and
characters are Multi30k's while the texts are (nearly all) distinct; valid and test are
Multi30k's own. It then runs `attnseq train config=multi30k_transformer` on it twice, in a
fresh process each time, stopped (SIGKILL) once `--updates` updates are logged:

- first run, empty cache: preparation (files -> sentencepiece training -> encoding -> Arrow
  cache) is the time from the command to the log line that the cache is written; pairs/s is
  the corpus size over it;
- cached run: the same command again (the cache is read, not built).

Per run: the peak of private memory (RssAnon in /proc/PID/status, polled every 50 ms) and,
beside it, the file-backed resident memory at that moment (RssFile: the mapped cache's pages,
shared and reclaimable, and the libraries' code); the time from the command to the first
update (the log line of step 1); seconds per update (steps 2..N). The cache size is that of the
`prepared` entry on disk.

`--before DIR` runs the same measurements with another checkout of attnseq on PYTHONPATH
(e.g. `git archive COMMIT | tar -x -C DIR`): today's code beside the new one.

`--ddp` adds the data-parallel check: two gloo ranks (`torchrun --nproc_per_node=2`) training a
small transformer on the 1M-pair corpus from the cache for 200 updates; at the end the sum of
the ranks' Pss (/proc/PID/smaps_rollup) against the sum of their private memory plus one copy
of the cache, and the Pss and Rss of the cache's mappings alone (smaps): the corpus is in memory
once per machine, not once per rank.

Writes DIR/data_scale.json, DIR/data_scale_table.md (included by docs/results/data_scale.md)
and DIR/data_scale.png (`--out DIR`), so a rerun updates the page. Timings depend on what
else runs on the machine; memory does not.

Usage (about 15 minutes for 0.1M and 1M, before and after, on 2 cores):
    git archive e2c0af2 | tar -x -C /tmp/attnseq-before
    ATTNSEQ_DATA=../shared/data python benchmarks/benchmark_data_scale.py --out docs/results \\
        --work /tmp/data-scale --before /tmp/attnseq-before --ddp
    ... --sizes 100000 1000000 5000000     # the 5M run as well (several minutes more)
"""

import argparse
import contextlib
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import time
from datetime import date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024**2
POLL_SECONDS = 0.05
STEP_LINE = re.compile(r"^\[(?P<time>[\d-]+ [\d:,]+)\]\[attnseq\]\[\w+\] - step (?P<step>\d+)/")
CACHED_LINE = re.compile(r"^\[(?P<time>[\d-]+ [\d:,]+)\].* tokenized splits cached in ")
# a transformer small enough that 200 updates of two ranks take a few minutes on 2 cores
DDP_MODEL = [
    "model.d_model=64",
    "model.heads=2",
    "model.ff_dim=128",
    "model.enc_layers=1",
    "model.dec_layers=1",
    "data.max_tokens=512",
]


# ------------------------------------------------------------------------------- corpora
def make_corpus(source: Path, folder: Path, size: int, seed: int = 1) -> Path:
    """`size` pairs recombined from Multi30k (see the module docstring) as
    folder/multi30k/train.{de,en}, with Multi30k's val and test beside them; kept when
    already there."""
    target = folder / "multi30k"
    done = target / "train.en"
    if done.is_file():
        return folder
    target.mkdir(parents=True, exist_ok=True)
    de = (source / "multi30k/train.de").read_text(encoding="utf-8").splitlines()
    en = (source / "multi30k/train.en").read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    with (
        (target / "train.de").open("w", encoding="utf-8") as src_out,
        (target / "train.en.part").open("w", encoding="utf-8") as tgt_out,
    ):
        for _ in range(size):
            k = rng.randrange(len(de))
            src_words, tgt_words = de[k].split(), en[k].split()
            rng.shuffle(src_words)
            rng.shuffle(tgt_words)
            src_out.write(" ".join(src_words) + "\n")
            tgt_out.write(" ".join(tgt_words) + "\n")
    (target / "train.en.part").rename(done)
    for split in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            name = f"{split}.{lang}"
            (target / name).write_text((source / "multi30k" / name).read_text("utf-8"), "utf-8")
    return folder


# ------------------------------------------------------------------------------ measuring
def memory(pid: int) -> dict[str, int]:
    """RssAnon, RssFile and RssShmem of a process in bytes (empty once it is gone)."""
    values: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem"):
                values[name] = int(rest.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return values


def pss(pid: int, cache: Path) -> dict[str, int]:
    """Pss of the whole process (smaps_rollup) and Pss and Rss of its mappings of files
    under `cache`, in bytes."""
    total = int(re.search(r"^Pss:\s+(\d+)", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)[1])
    cache_pss = cache_rss = 0
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and re.match(r"^[0-9a-f]+-[0-9a-f]+$", head[0]):
            inside = len(head) >= 6 and head[5].startswith(str(cache))
        elif inside and head[0] == "Pss:":
            cache_pss += int(head[1])
        elif inside and head[0] == "Rss:":
            cache_rss += int(head[1])
    return {"pss": total * 1024, "cache_pss": cache_pss * 1024, "cache_rss": cache_rss * 1024}


def log_time(stamp: str) -> float:
    """Seconds since the epoch of a log line's local time stamp."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def directory_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def train_command(data_root: Path, run_dir: Path, updates: int, extra: list[str]) -> list[str]:
    return [
        "config=multi30k_transformer", f"data.root={data_root}",
        f"trainer.max_steps={updates + 100}", "trainer.log_every=1",
        "trainer.validate_every=100000", "trainer.threads=1", "trainer.progress=false",
        "trainer.num_heatmaps=0", "trainer.device=cpu", f"hydra.run.dir={run_dir}", *extra,
    ]  # fmt: skip


# Every run starts in this folder, never in a checkout: `python -m` and `python -c` put the
# working directory first on sys.path, ahead of PYTHONPATH, so a run started in the repository
# would import the repository's attnseq whatever --before says.
NEUTRAL = Path("/")


def environment(code: Path, cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(code),
        "ATTNSEQ_CACHE": str(cache),
        "OMP_NUM_THREADS": "1",
    }


def measure_run(code: Path, data_root: Path, cache: Path, run_dir: Path, updates: int) -> dict:
    """One `attnseq train` until `updates` updates are logged: memory peaks and times."""
    subprocess.run(["rm", "-rf", str(run_dir)], check=True)  # an old train.log would mislead
    command = [sys.executable, "-m", "attnseq", "train"]
    command += train_command(data_root, run_dir, updates, [])
    started = time.time()
    process = subprocess.Popen(
        command,
        env=environment(code, cache),
        cwd=NEUTRAL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak: dict[str, int] = {"RssAnon": 0, "RssFile": 0}
    log = run_dir / "train.log"
    steps: dict[int, float] = {}
    while process.poll() is None:
        now = memory(process.pid)
        if now.get("RssAnon", 0) > peak["RssAnon"]:
            peak = {"RssAnon": now["RssAnon"], "RssFile": now.get("RssFile", 0)}
        if log.is_file():
            steps = {
                int(match["step"]): log_time(match["time"])
                for match in map(STEP_LINE.match, log.read_text().splitlines())
                if match
            }
            if max(steps, default=0) >= updates:
                process.send_signal(signal.SIGKILL)
                break
        time.sleep(POLL_SECONDS)
    _, err = process.communicate()
    if max(steps, default=0) < updates:
        raise RuntimeError(f"training ended before {updates} updates:\n{err[-3000:]}")
    text = log.read_text()
    cached = [log_time(m["time"]) for m in map(CACHED_LINE.match, text.splitlines()) if m]
    return {
        "peak_rss_anon_mib": peak["RssAnon"] / MIB,
        "rss_file_at_peak_mib": peak["RssFile"] / MIB,
        "preparation_s": cached[0] - started if cached else None,
        "first_update_s": steps[1] - started,
        "seconds_per_update": (steps[updates] - steps[2]) / (updates - 2),
    }


PROBE = """
import json, sys
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) * 1024
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from attnseq.config import CONFIG_DIR
from attnseq.config.schema import register_configs
from attnseq.data.batching import TokenBatchSampler, example_lengths
from attnseq.data.prepare import prepare_data
register_configs()
with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
    cfg = OmegaConf.to_object(compose("train", overrides=["experiment=multi30k_transformer",
                                                          "data.root=" + sys.argv[1]]))
import attnseq
start = anon()
data = prepare_data(cfg.data, cfg.seed)
loaded = anon()
sampler = TokenBatchSampler(example_lengths(data.examples["train"]), cfg.data.max_tokens,
                            max_sentences=cfg.data.max_sentences, seed=cfg.seed)
batches = getattr(sampler, "epoch_batches", sampler.batches)(0)  # what training iterates
print(json.dumps({"load": loaded - start, "load_and_batches": anon() - start,
                  "code": attnseq.__file__}))
"""


def data_memory(code: Path, corpus: Path, cache: Path) -> dict[str, float]:
    """Private memory (RssAnon) that reading the cached splits and building an epoch's batches
    add to a process that has imported everything: the data's own cost, free of the training
    step's transient peak (which depends on which batches come first)."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(corpus)],
        env=environment(code, cache), cwd=NEUTRAL, capture_output=True, text=True, check=True,
    )  # fmt: skip
    values = json.loads(result.stdout.strip().splitlines()[-1])
    imported = Path(values.pop("code")).parents[1]
    if imported.resolve() != code.resolve():
        raise RuntimeError(f"the probe imported attnseq from {imported}, not {code}")
    return {f"{name}_rss_anon_mib": value / MIB for name, value in values.items()}


def measure_size(code: Path, label: str, corpus: Path, size: int, work: Path, updates: int):
    cache = work / f"cache-{label}-{size}"
    if cache.exists():
        subprocess.run(["rm", "-rf", str(cache)], check=True)
    first = measure_run(code, corpus, cache, work / f"run-{label}-{size}-first", updates)
    again = measure_run(code, corpus, cache, work / f"run-{label}-{size}-cached", updates)
    prepared = cache / "prepared"
    row = {
        "code": label,
        "pairs": size,
        "preparation_s": first["preparation_s"],
        "pairs_per_s": size / first["preparation_s"] if first["preparation_s"] else None,
        "cache_mib": directory_size(prepared) / MIB,
        "first": first,
        "cached": again,
        "data": data_memory(code, corpus, cache),
    }
    print(json.dumps(row), flush=True)
    return row


def ddp_check(code: Path, corpus: Path, work: Path, updates: int = 200) -> dict:
    """Two gloo ranks on the cached corpus (the 'after' cache), memory at `updates` updates."""
    cache = work / "cache-after-ddp"
    run_dir = work / "run-ddp"
    subprocess.run(["rm", "-rf", str(cache), str(run_dir)], check=True)
    # prepare once (one process), so that both ranks start from the cache
    command = train_command(corpus, work / "run-ddp-prepare", 2, DDP_MODEL)
    subprocess.run(
        [sys.executable, "-m", "attnseq", "train", *command],
        env=environment(code, cache), cwd=NEUTRAL, check=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "attnseq", "train", *train_command(corpus, run_dir, updates, DDP_MODEL),
    ]  # fmt: skip
    process = subprocess.Popen(
        torchrun, env=environment(code, cache), cwd=NEUTRAL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    log = run_dir / "train.log"
    result: dict[str, Any] = {}
    while process.poll() is None:
        if log.is_file() and re.search(rf"\] - step {updates}/", log.read_text()):
            ranks = [
                int(pid)
                for pid in subprocess.run(
                    ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
                ).stdout.split()
            ]
            prepared = cache / "prepared"
            per_rank = [{**memory(pid), **pss(pid, prepared)} for pid in ranks]
            result = {
                "ranks": len(ranks),
                "updates": updates,
                "pss_sum_mib": sum(r["pss"] for r in per_rank) / MIB,
                "rss_anon_sum_mib": sum(r["RssAnon"] for r in per_rank) / MIB,
                "cache_mib": directory_size(prepared) / MIB,
                "cache_pss_sum_mib": sum(r["cache_pss"] for r in per_rank) / MIB,
                "cache_rss_per_rank_mib": [r["cache_rss"] / MIB for r in per_rank],
            }
            process.kill()
            for pid in ranks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.5)
    _, err = process.communicate()
    if not result:
        raise RuntimeError(f"the data-parallel run ended before {updates} updates:\n{err[-3000:]}")
    result["private_plus_one_cache_mib"] = result["rss_anon_sum_mib"] + result["cache_mib"]
    print(json.dumps({"ddp": result}), flush=True)
    return result


# ------------------------------------------------------------------------------- reporting
def table(rows: list[dict]) -> str:
    lines = [
        "| code | pairs | preparation (s) | pairs/s | cache (MiB) | peak RssAnon, first run"
        " (MiB) | peak RssAnon, cached run (MiB) | RssFile at that peak (MiB) | command to"
        " first update, cached (s) | s/update | RssAnon of the data: cached splits read +"
        " one epoch's batches (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        first, cached = row["first"], row["cached"]
        data = row.get("data", {}).get("load_and_batches_rss_anon_mib")
        lines.append(
            f"| {row['code']} | {row['pairs']:,} | {row['preparation_s']:.1f} | "
            f"{row['pairs_per_s']:,.0f} | {row['cache_mib']:,.0f} | "
            f"{first['peak_rss_anon_mib']:,.0f} | {cached['peak_rss_anon_mib']:,.0f} | "
            f"{cached['rss_file_at_peak_mib']:,.0f} | {cached['first_update_s']:.1f} | "
            f"{cached['seconds_per_update']:.2f} | "
            + ("n/a" if data is None else f"{data:,.0f}")
            + " |"
        )
    return "\n".join(lines) + "\n"


def ddp_table(ddp: dict) -> str:
    return (
        "| ranks | updates | sum of Pss (MiB) | sum of RssAnon (MiB) | cache (MiB) | sum of"
        " RssAnon + one cache (MiB) | Pss of the cache's mappings, both ranks (MiB) | Rss of"
        " the cache's mappings per rank (MiB) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---|\n"
        f"| {ddp['ranks']} | {ddp['updates']} | {ddp['pss_sum_mib']:,.0f} | "
        f"{ddp['rss_anon_sum_mib']:,.0f} | {ddp['cache_mib']:,.0f} | "
        f"{ddp['private_plus_one_cache_mib']:,.0f} | {ddp['cache_pss_sum_mib']:,.0f} | "
        + ", ".join(f"{value:,.0f}" for value in ddp["cache_rss_per_rank_mib"])
        + " |\n"
    )


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (memory_axes, start_axes) = plt.subplots(1, 2, figsize=(10, 4))
    for label, style in (("before", "--"), ("after", "-")):
        chosen = sorted((r for r in rows if r["code"] == label), key=lambda r: r["pairs"])
        if not chosen:
            continue
        pairs = [r["pairs"] / 1e6 for r in chosen]
        for run, marker in (("first", "o"), ("cached", "s")):
            memory_axes.plot(
                pairs, [r[run]["peak_rss_anon_mib"] for r in chosen], style, marker=marker,
                label=f"{label}, {run} run",
            )  # fmt: skip
        start_axes.plot(
            pairs, [r["cached"]["first_update_s"] for r in chosen], style, marker="s",
            label=f"{label}, cached run",
        )  # fmt: skip
    memory_axes.set(xlabel="training pairs (millions)", ylabel="peak RssAnon (MiB)")
    memory_axes.set_title("private memory")
    start_axes.set(xlabel="training pairs (millions)", ylabel="seconds")
    start_axes.set_title("command to first update")
    for axes in (memory_axes, start_axes):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(out: Path, rows: list[dict], ddp: dict | None, note: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"host": note, "date": date.today().isoformat(), "rows": rows, "ddp": ddp}
    (out / "data_scale.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    text = table(rows) + f"\n{note}\n"
    if ddp is not None:
        text += "\nTwo data-parallel ranks on the 1M-pair corpus:\n\n" + ddp_table(ddp)
    (out / "data_scale_table.md").write_text(text, encoding="utf-8")
    figure(rows, out / "data_scale.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--updates", type=int, default=10, help="updates per run (>= 3)")
    parser.add_argument("--work", type=Path, default=Path("runs/data_scale"))
    parser.add_argument("--out", type=Path, default=Path("runs/data_scale"))
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--ddp", action="store_true", help="the two-rank check on 1M pairs")
    parser.add_argument(
        "--codes", nargs="+", choices=["after", "before"], help="measure only these (default: all)"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="a data_scale.json whose rows (and DDP check) this run keeps where it does not"
        " measure them itself",
    )
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("ATTNSEQ_DATA", "data")))
    args = parser.parse_args(argv)
    if args.updates < 3:
        parser.error("--updates must be >= 3")
    if not (args.data / "multi30k/train.de").is_file():
        parser.error(f"no Multi30k under {args.data} (set ATTNSEQ_DATA or --data)")
    codes = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    if args.codes:
        codes = [(label, code) for label, code in codes if label in args.codes]
    kept = json.loads(args.keep.read_text(encoding="utf-8")) if args.keep else {}
    measured = {(label, size) for label, _ in codes for size in args.sizes}
    rows = [row for row in kept.get("rows", []) if (row["code"], row["pairs"]) not in measured]
    for size in args.sizes:
        corpus = make_corpus(args.data, args.work / f"corpus-{size}", size)
        for label, code in codes:
            rows.append(measure_size(code, label, corpus, size, args.work, args.updates))
    ddp = kept.get("ddp")
    if args.ddp:
        corpus = make_corpus(args.data, args.work / "corpus-1000000", 1_000_000)
        ddp = ddp_check(ROOT, corpus, args.work)
    load = os.getloadavg()[0]
    note = (
        f"Measured {date.today().isoformat()} on {platform.node() or 'this host'}: "
        f"{os.cpu_count()} cores, load average {load:.1f} at the end (timings under that "
        f"contention; memory is not affected by it), one training thread, seed 1, "
        f"{args.updates} updates per run."
    )
    rows.sort(key=lambda row: (row["pairs"], row["code"] != "before"))
    write_outputs(args.out, rows, ddp, note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
