"""Training options side by side at the same budget: one `attnseq train` run per variant of one
config, then a table of test BLEU and chrF, the best validation BLEU, updates and time, and a
figure of the validation loss and BLEU over updates.

A variant is NAME or NAME=OVERRIDES (space-separated Hydra overrides added to the common ones
given after `--`). Each runs into OUT/NAME; a run that already has a metrics.json is not repeated
(delete OUT/NAME to redo it), so two processes given different variants can share OUT.

Usage (from the repository root): the budget of the README, 1,000 updates of the Multi30k
transformer (about 15 minutes each on 2 idle cores; two processes side by side, one thread
each, take about twice as long per run and give the same models):

    ATTNSEQ_DATA=../shared/data .venv/bin/python studies/compare_training_options.py \\
        --out runs/options --variant baseline \\
        --variant "ema=optim.ema_decay=0.99" \\
        --variant "bpe_dropout=data.bpe_dropout=0.1" \\
        --variant "accumulate4=data.max_tokens=512 optim.accumulate=4" \\
        --variant "seed2=seed=2" \\
        --figure runs/options/curves.png \\
        -- config=multi30k_transformer trainer.max_steps=1000 trainer.validate_every=250

Without --run the script only tabulates the runs already in OUT.

Columns: the --metrics of best.pt on the test split (metrics.json; default BLEU and chrF, greedy
unless the config sets a beam), the best validation value of the early-stopping metric and its
update, updates done, the training loop's minutes and seconds per epoch (validations included)
and target tokens per second, from train.log's last progress line.

Soft against hard attention on the generated tasks (each variant names its own experiment;
`--metrics exact_match aer`):

    .venv/bin/python studies/compare_training_options.py --out runs/hard_reverse --run \
        --metrics exact_match aer --variant soft=config=reverse_rnn_bahdanau \
        --variant gumbel=config=reverse_rnn_hard \
        --variant "reinforce=config=reverse_rnn_hard model.attention.hard=reinforce" \
        -- trainer.threads=1
"""

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

BATCHES = re.compile(
    r"(\d+) batches per epoch(?: on each of \d+ processes)?(?:, (\d+) per update)?"
)
PROGRESS = re.compile(r"step (\d+)(?:/\d+)? .*?([\d,]+) tgt tok/s .*?elapsed (\d+):(\d\d):(\d\d)")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """NAME or NAME=OVERRIDES -> (NAME, [override, ...])."""
    name, _, overrides = text.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise SystemExit(f"variant name {name!r}: use letters, digits, '_', '.', '-'")
    return name, overrides.split()


def train(out: Path, name: str, overrides: list[str], common: list[str]) -> None:
    run_dir = out / name
    if (run_dir / "metrics.json").is_file():
        print(f"{name}: done already ({run_dir})", file=sys.stderr)
        return
    command = [
        sys.executable,
        "-m",
        "attnseq",
        "train",
        *common,
        *overrides,
        f"hydra.run.dir={run_dir}",
        "resume=auto",  # a killed comparison continues where it stopped
    ]
    print(" ".join(command), file=sys.stderr)
    subprocess.run(command, check=True)


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(update, value) of one TensorBoard scalar of a run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    if tag not in events.Tags()["scalars"]:
        return []
    return [(event.step, event.value) for event in events.Scalars(tag)]


def collect(run_dir: Path, metrics: list[str]) -> dict[str, Any]:
    """One row of the table from a finished run's files."""
    results = json.loads((run_dir / "metrics.json").read_text())
    row: dict[str, Any] = {
        "run": run_dir.name,
        "test": {name: results.get(f"test/{name}") for name in metrics},
        # (early-stopping metric, its best validation value), from valid/best_bleu, ...
        "best_valid": next(
            (
                (k.removeprefix("valid/best_"), v)
                for k, v in results.items()
                if k.startswith("valid/best_")
            ),
            None,
        ),
        "best_step": results.get("best_step"),
    }
    log = (run_dir / "train.log").read_text() if (run_dir / "train.log").is_file() else ""
    progress = PROGRESS.findall(log)
    batches = BATCHES.search(log)
    if progress:
        step, tokens, hours, minutes, seconds = progress[-1]
        elapsed = int(hours) * 3600 + int(minutes) * 60 + int(seconds)
        row["updates"] = int(step)
        row["tgt_tok_per_s"] = int(tokens.replace(",", ""))
        row["minutes"] = round(elapsed / 60, 1)
        if batches:
            per_update = int(batches.group(2) or 1)
            updates_per_epoch = math.ceil(int(batches.group(1)) / per_update)
            row["seconds_per_epoch"] = round(elapsed * updates_per_epoch / int(step), 1)
    row["curves"] = {tag: scalars(run_dir, f"valid/{tag}") for tag in ("loss", metrics[0])}
    return row


def table(rows: list[dict[str, Any]], metrics: list[str]) -> str:
    columns = ["run", *(f"test {name}" for name in metrics), "best valid (update)", "updates"]
    columns += ["minutes", "s/epoch", "tgt tok/s"]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for row in rows:
        cells = [row["run"], *(number(row["test"][name]) for name in metrics)]
        best = row["best_valid"]
        cells.append("-" if best is None else f"{best[0]} {number(best[1])} ({row['best_step']})")
        keys = ("updates", "minutes", "seconds_per_epoch", "tgt_tok_per_s")
        cells += [str(row.get(key, "?")) for key in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0 or abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}" if abs(value) >= 1e-3 else f"{value:.1e}"


def figure(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tags = list(rows[0]["curves"])
    fig, axes = plt.subplots(1, len(tags), figsize=(5.5 * len(tags), 4))
    for row in rows:
        for axis, tag in zip(axes, tags, strict=True):
            if row["curves"].get(tag):
                steps, values = zip(*row["curves"][tag], strict=True)
                axis.plot(steps, values, marker="o", label=row["run"])
    for axis, tag in zip(axes, tags, strict=True):
        axis.set(xlabel="update", ylabel=f"validation {tag}")
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str]) -> None:
    if "--" in argv:
        split = argv.index("--")
        argv, common = argv[:split], argv[split + 1 :]
    else:
        common = []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variant", action="append", default=[], help="NAME or NAME=OVERRIDES")
    parser.add_argument("--run", action="store_true", help="train the variants missing in OUT")
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=["bleu", "chrf"],
        help="test metrics of metrics.json to tabulate; the first one's validation curve is drawn",
    )
    parser.add_argument("--figure", type=Path, help="write the validation curves here (PNG)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    variants = [parse_variant(text) for text in args.variant]
    if args.run:
        for name, overrides in variants:
            train(args.out, name, overrides, common)
    names = [name for name, _ in variants] or sorted(p.name for p in args.out.iterdir())
    done = [name for name in names if (args.out / name / "metrics.json").is_file()]
    rows = [collect(args.out / name, args.metrics) for name in done]
    if not rows:
        raise SystemExit(f"no finished run in {args.out}")
    print(table(rows, args.metrics))
    if args.figure:
        figure(rows, args.figure)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
