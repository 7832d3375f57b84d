"""Quality and cost of each `model.attention.kind` on DialogSum at the same training budget:
one `attnseq train` run per kind, then a table of ROUGE-L and time per epoch.

Every run is `attnseq train config=dialogsum_transformer model.attention.kind=KIND` plus the
per-kind parameters below and the overrides given after `--` (the budget, e.g.
trainer.max_steps=N for the same number of updates, or trainer.max_minutes=M for the same
wall-clock time), into OUT/KIND. An override given after `--` replaces the default of the same
key. Runs that already have a metrics.json are not repeated (delete OUT/KIND to redo one).

Per-kind defaults for DialogSum (sources up to data.max_src_len = 400 pieces):
    local       model.attention.D=32                 (window of 65 pieces)
    strided     model.attention.stride=20            (~ sqrt(400), Child et al.'s choice)
    longformer  model.attention.D=32 model.attention.global_tokens=4
    linformer   model.attention.proj_dim=64          (n = model.max_positions = 1024)
    performer   model.attention.features=128
    bigbird     model.attention.block_size=16 model.attention.global_blocks=2
                model.attention.random_blocks=3     (3-block window: 7 blocks of 16 per row)
With --decoder-self, the causal kinds (local, strided, linear, performer, bigbird) are also used
for decoder self-attention.

Columns: test ROUGE-L/1/2 (of best.pt, from metrics.json), the best validation ROUGE-L, updates
and epochs done, seconds per epoch = training-loop seconds x batches per epoch / updates (the
loop's time includes its validations, so with the same trainer.validate_every every kind pays the
same number of them), training seconds per epoch (the same without validations, from the
wall-clock spacing of the train/loss scalars before the first validation) and the number of
parameters.

    # the comparison in the README (about 22 minutes per kind on one core: a d_model-128
    # model, 700 updates, one validation at the end; two processes side by side, one per core)
    python studies/compare_attention_kinds.py --out outputs/attention_kinds \\
        --kinds full,local,strided,longformer -- model.d_model=128 model.ff_dim=512 \\
        trainer.max_steps=700 trainer.validate_every=700 trainer.max_minutes=null \\
        trainer.early_stopping_patience=0 trainer.threads=1 &
    python studies/compare_attention_kinds.py --out outputs/attention_kinds \\
        --kinds linformer,linear,performer,bigbird -- (the same overrides)
    # a smoke test: a few steps on 500 dialogues, short decodes (minutes)
    python studies/compare_attention_kinds.py --out /tmp/kinds -- trainer.max_steps=20 \\
        data.max_examples=500 trainer.validate_every=20 decoding.max_output_ratio=0.05 \\
        decoding.max_output_extra=5
"""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from attnseq.config.choices import AttentionKind

# every `model.attention.kind`: new kinds join automatically
KINDS = tuple(kind.value for kind in AttentionKind)
CAUSAL = tuple(kind.value for kind in AttentionKind if kind.causal and kind.value != "full")
DEFAULTS = {
    "local": ["model.attention.D=32"],
    "strided": ["model.attention.stride=20"],
    "longformer": ["model.attention.D=32", "model.attention.global_tokens=4"],
    "linformer": ["model.attention.proj_dim=64"],
    "performer": ["model.attention.features=128"],
    "bigbird": [
        "model.attention.block_size=16",
        "model.attention.global_blocks=2",
        "model.attention.random_blocks=3",
    ],
}


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Overrides after -- go to every `attnseq train` run.",
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    parser.add_argument("--config", default="dialogsum_transformer", help="experiment config")
    parser.add_argument("--out", type=Path, default=Path("outputs/attention_kinds"))
    parser.add_argument(
        "--decoder-self", action="store_true", help="causal kinds also in the decoder"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def command_for(kind: str, args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """The `attnseq train` command line of one kind; user overrides win over the defaults."""
    given = {override.split("=", 1)[0].lstrip("+~") for override in overrides}
    defaults = list(DEFAULTS.get(kind, []))
    if args.decoder_self and kind in CAUSAL:
        defaults.append("model.attention.decoder_self=true")
    defaults = [d for d in defaults if d.split("=", 1)[0] not in given]
    return [
        sys.executable,
        "-m",
        "attnseq",
        "train",
        f"config={args.config}",
        f"model.attention.kind={kind}",
        *defaults,
        *overrides,
        f"hydra.run.dir={args.out / kind}",
    ]


def training_seconds_per_update(run_dir: Path) -> float | None:
    """Seconds per update of training alone: the wall-clock spacing of the train/loss scalars in
    TensorBoard (logged every trainer.log_every updates) between the first and the last one that
    have no validation between them; None without two such scalars. Unlike the loop's time, it
    leaves out validation decoding, whose cost depends on how long the outputs are."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    if "train/loss" not in tags:
        return None
    validated = (
        [event.step for event in events.Scalars("valid/loss")] if "valid/loss" in tags else []
    )
    first_validation = min(validated, default=float("inf"))  # runs validated only at the end: all
    stretch = [
        (e.step, e.wall_time) for e in events.Scalars("train/loss") if e.step <= first_validation
    ]
    if len(stretch) < 2:
        return None
    (first_step, first_time), (last_step, last_time) = stretch[0], stretch[-1]
    return (last_time - first_time) / (last_step - first_step)


def collect(run_dir: Path) -> dict:
    """ROUGE from metrics.json, updates/epochs/seconds from last.pt, batches per epoch and
    parameters from train.log, training-only seconds from TensorBoard."""
    from attnseq.io.checkpoint import load_checkpoint

    metrics = json.loads((run_dir / "metrics.json").read_text())
    progress = load_checkpoint(run_dir / "checkpoints" / "last.pt")["progress"]
    log = (run_dir / "train.log").read_text()
    batches = int(re.search(r"(\d+) batches per epoch", log).group(1))  # type: ignore[union-attr]
    parameters = re.search(r"model: \w+, ([\d,]+) parameters", log)
    steps = max(progress["step"], 1)
    per_update = training_seconds_per_update(run_dir)
    return {
        "test/rouge_l": metrics.get("test/rouge_l"),
        "test/rouge1": metrics.get("test/rouge1"),
        "test/rouge2": metrics.get("test/rouge2"),
        "valid/best_rouge_l": metrics.get("valid/best_rouge_l"),
        "steps": progress["step"],
        "epochs": progress["step"] / batches,
        "seconds_per_epoch": progress["train_seconds"] * batches / steps,
        "training_seconds_per_epoch": None if per_update is None else per_update * batches,
        "parameters": parameters.group(1) if parameters else None,
    }


def table(rows: dict[str, dict]) -> str:
    def number(value: object, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"  # type: ignore[str-format]

    lines = [
        "| kind | test ROUGE-L | test ROUGE-1 | test ROUGE-2 | best valid ROUGE-L | updates "
        "| epochs | s / epoch | training s / epoch | parameters |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, row in rows.items():
        if "error" in row:
            lines.append(f"| {kind} | {row['error']} |" + " |" * 9)
            continue
        lines.append(
            f"| {kind} | {number(row['test/rouge_l'])} | {number(row['test/rouge1'])} "
            f"| {number(row['test/rouge2'])} | {number(row['valid/best_rouge_l'])} "
            f"| {row['steps']} | {number(row['epochs'], 2)} "
            f"| {number(row['seconds_per_epoch'], 0)} "
            f"| {number(row['training_seconds_per_epoch'], 0)} | {row['parameters']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args, overrides = parse_args(argv)
    kinds = args.kinds.split(",")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kinds {sorted(unknown)}; valid: {', '.join(KINDS)}")
    rows: dict[str, dict] = {}
    for kind in kinds:
        command = command_for(kind, args, overrides)
        print(" ".join(command[1:]), flush=True)
        if args.dry_run:
            continue
        run_dir = args.out / kind
        if not (run_dir / "metrics.json").is_file():
            result = subprocess.run(command, env=os.environ.copy())
            if result.returncode != 0:
                rows[kind] = {"error": f"attnseq train exited with {result.returncode}"}
                continue
        rows[kind] = collect(run_dir)
    if args.dry_run:
        return
    text = table(rows)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(text)
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
