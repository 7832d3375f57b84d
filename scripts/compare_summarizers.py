"""Summarization comparison on DialogSum and AESLC: the lead baseline, the plain
attention model and the pointer-generator with coverage (See et al. 2017), with the same model
size and training budget. Prints one markdown table per dataset (ROUGE-1/2/L F1 x100 and the
share of repeated trigrams, attnseq/evaluation/metrics.py) and writes them to OUT/summary.md (and
OUT/results.json).

Rows:
- lead-N: the first N whitespace words of the source. N is the mean length in words of the
  training split's references, rounded (DialogSum: 23, AESLC: 4 on the full training splits),
  so the lead is as long as an average summary: the usual lead-3-sentences baseline of news
  summarization does not fit dialogues (the first turns are greetings) or subject lines.
- attention: `attnseq train config=DATASET_rnn_attention` (GRU encoder-decoder, additive attention).
- pointer-generator + coverage: `attnseq train config=DATASET_pointer_generator`, the same
  model plus the copy distribution and coverage (the packaged experiment/*.yaml hold both; a test
  holds them equal in everything else).
Models are scored on the test split by their own run (best checkpoint by validation ROUGE-L,
beam 4, no n-gram blocking), as `metrics.json` records it; the lead on the same references.

Usage (from the repository root, ATTNSEQ_DATA pointing at the corpora):

    # the real comparison (4 models of 15-45 minutes each on a 2-core CPU)
    ATTNSEQ_DATA=../shared/data .venv/bin/python scripts/compare_summarizers.py --out compare

    # a smoke test of the whole pipeline (minutes): any `attnseq train` overrides after --
    ATTNSEQ_DATA=../shared/data .venv/bin/python scripts/compare_summarizers.py --out /tmp/cmp \\
        -- trainer.max_steps=30 data.max_examples=300 trainer.validate_every=30

Options: --datasets dialogsum aeslc (default both), --reuse (keep runs whose metrics.json
exists, e.g. after an interruption), --lead-only (no training).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from attnseq.cli.hydra_entry import CONFIG_DIR
from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.data.sources import load_splits
from attnseq.evaluation.metrics import repeated_trigrams, rouge

DATASETS = ("dialogsum", "aeslc")
MODELS = (
    ("attention", "{dataset}_rnn_attention"),
    ("pointer-generator + coverage", "{dataset}_pointer_generator"),
)
COLUMNS = ("rouge1", "rouge2", "rouge_l", "repeated_trigrams")


def data_config(dataset: str) -> TrainConfig:
    """The packaged data/DATASET.yaml in the schema."""
    base = config_to_dict(TrainConfig())
    values = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "data" / f"{dataset}.yaml"))
    assert isinstance(values, dict)
    return config_from_dict({**base, "data": {**base["data"], **values}})


def lead_baseline(dataset: str) -> dict[str, Any]:
    """ROUGE and repeated trigrams of the first N source words on the test split."""
    cfg = data_config(dataset)
    splits = load_splits(cfg.data, cfg.seed, ["train", "test"])
    n_words = round(statistics.fmean(len(tgt.split()) for _, tgt in splits["train"]))
    leads = [" ".join(src.split()[:n_words]) for src, _ in splits["test"]]
    references = [tgt for _, tgt in splits["test"]]
    scores = rouge(leads, references)
    scores["repeated_trigrams"] = repeated_trigrams(leads)
    return {"name": f"lead-{n_words}", "command": f"first {n_words} source words", **scores}


def train(experiment: str, run_dir: Path, overrides: list[str], reuse: bool) -> dict[str, Any]:
    """`attnseq train config=EXPERIMENT` into run_dir; its test metrics, updates and training
    minutes (the training loop's time from last.pt, validations included, start-up and the final
    test decoding not; a reused run reports its own)."""
    from attnseq.io.checkpoint import load_checkpoint

    metrics_file = run_dir / "metrics.json"
    command = [
        sys.executable, "-m", "attnseq", "train", f"config={experiment}",
        f"hydra.run.dir={run_dir}", "trainer.progress=false", *overrides,
    ]  # fmt: skip
    shown = " ".join(["attnseq train", *command[4:]])
    if not (reuse and metrics_file.is_file()):
        print(f"+ {shown}", file=sys.stderr, flush=True)
        result = subprocess.run(command, env=os.environ.copy())
        if result.returncode != 0:
            raise SystemExit(f"{experiment} failed with exit status {result.returncode}")
    metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
    progress = load_checkpoint(run_dir / "checkpoints" / "last.pt")["progress"]
    row = {key: metrics[f"test/{key}"] for key in COLUMNS}
    row["p_gen_mean"] = metrics.get("test/p_gen_mean")
    return {
        "command": shown,
        "updates": progress["step"],
        "minutes": progress["train_seconds"] / 60,
        **row,
    }


def table(dataset: str, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"### {dataset}",
        "",
        "| model | ROUGE-1 | ROUGE-2 | ROUGE-L | repeated trigrams (%) | updates | minutes |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        updates = f"{row['updates']:,}" if "updates" in row else ""
        minutes = f"{row['minutes']:.1f}" if "minutes" in row else ""
        cells = " | ".join(f"{row[key]:.2f}" for key in COLUMNS)
        lines.append(f"| {row['name']} | {cells} | {updates} | {minutes} |")
    lines += ["", "Commands:", ""]
    lines += [f"- {row['name']}: `{row['command']}`" for row in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("compare_summarizers"))
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--reuse", action="store_true", help="keep finished runs")
    parser.add_argument("--lead-only", action="store_true", help="train nothing")
    parser.add_argument("overrides", nargs="*", help="attnseq train overrides (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {}
    report = []
    for dataset in args.datasets:
        rows = [lead_baseline(dataset)]
        if not args.lead_only:
            for name, experiment in MODELS:
                experiment = experiment.format(dataset=dataset)
                run = train(experiment, args.out / experiment, args.overrides, args.reuse)
                rows.append({"name": name, **run})
        results[dataset] = rows
        report.append(table(dataset, rows))
        print(report[-1], flush=True)
    if args.overrides:
        report.insert(0, f"Overrides for every model: `{' '.join(args.overrides)}`\n")
    (args.out / "summary.md").write_text("\n".join(report), encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"wrote {args.out / 'summary.md'} and {args.out / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
