"""Summarization comparison on DialogSum and AESLC: the lead baseline, the plain
attention model and the pointer-generator with coverage (See et al. 2017), and with
--hierarchical the hierarchical attention models (Nallapati et al. 2016), with the same model
size and training budget. Prints one markdown table per dataset (ROUGE-1/2/L F1 x100, the share
of repeated trigrams, attnseq/evaluation/metrics.py, and the training cost) and writes them to
OUT/summary.md (and OUT/results.json).

Rows:
- lead-N: the first N whitespace words of the source. N is the mean length in words of the
  training split's references, rounded (DialogSum: 23, AESLC: 4 on the full training splits),
  so the lead is as long as an average summary: the usual lead-3-sentences baseline of news
  summarization does not fit dialogues (the first turns are greetings) or subject lines.
- attention: `attnseq train config=DATASET_rnn_attention` (GRU encoder-decoder, additive attention).
- pointer-generator + coverage: `attnseq train config=DATASET_pointer_generator`, the same
  model plus the copy distribution and coverage (the packaged experiment/*.yaml hold both; a test
  holds them equal in everything else).
- with --hierarchical: hierarchical (`config=DATASET_hierarchical`, or DATASET_rnn_attention
  with model.attention.hierarchy=sentence where no such experiment is packaged) and
  hierarchical + pointer-generator + coverage (`config=DATASET_pointer_generator
  model.attention.hierarchy=sentence`): the same models with segment x word attention.
Models are scored on the test split by their own run (best checkpoint by validation ROUGE-L,
beam 4, no n-gram blocking), as `metrics.json` records it; the lead on the same references.
With --seeds each model is trained once per seed (run folders NAME-seedN) and its row is the
mean over the seeds (results.json keeps each seed's scores).

Training cost: seconds per epoch (the training loop's time from last.pt over the epochs it ran,
from the batches per epoch its train.log reports) and that cost relative to the attention row
(same data and batches, so the same machine's ratio per update).

--figure (with --hierarchical) draws the segment attention (speaker turn x output step) of the
first hierarchical model over the first test dialogue to OUT/segment_attention_DATASET.png.

Usage (from the repository root, ATTNSEQ_DATA pointing at the corpora):

    # the real comparison (4 models of 15-45 minutes each on a 2-core CPU)
    ATTNSEQ_DATA=../shared/data .venv/bin/python studies/compare_summarizers.py --out compare

    # hierarchical vs flat on DialogSum over two seeds, with the figure (10 trainings)
    ATTNSEQ_DATA=../shared/data .venv/bin/python studies/compare_summarizers.py \\
        --out compare_hierarchical --datasets dialogsum --hierarchical --seeds 1 2 --figure

    # a smoke test of the whole pipeline (minutes): any `attnseq train` overrides after --
    ATTNSEQ_DATA=../shared/data .venv/bin/python studies/compare_summarizers.py --out /tmp/cmp \\
        -- trainer.max_steps=30 data.max_examples=300 trainer.validate_every=30

Options: --datasets dialogsum aeslc (default both), --reuse (keep runs whose metrics.json
exists, e.g. after an interruption), --lead-only (no training), --hierarchical, --seeds,
--figure, --models (a subset of the rows by their run names without the dataset:
rnn_attention pointer_generator hierarchical hierarchical_pointer_generator).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import OmegaConf

from attnseq.config import CONFIG_DIR
from attnseq.config.conversion import config_from_dict, config_to_dict
from attnseq.config.schema import TrainConfig
from attnseq.data.sources import load_splits
from attnseq.evaluation.metrics import repeated_trigrams, rouge

DATASETS = ("dialogsum", "aeslc")
HIERARCHY = "model.attention.hierarchy=sentence"


class Model(NamedTuple):
    """A row: its name, the packaged experiment, extra overrides and its run folder's name
    (templates of {dataset})."""

    name: str
    experiment: str
    overrides: tuple[str, ...]
    run: str


MODELS = (
    Model("attention", "{dataset}_rnn_attention", (), "{dataset}_rnn_attention"),
    Model(
        "pointer-generator + coverage",
        "{dataset}_pointer_generator",
        (),
        "{dataset}_pointer_generator",
    ),
)
HIERARCHICAL_MODELS = (
    Model("hierarchical", "{dataset}_hierarchical", (), "{dataset}_hierarchical"),
    Model(
        "hierarchical + pointer-generator + coverage",
        "{dataset}_pointer_generator",
        (HIERARCHY,),
        "{dataset}_hierarchical_pointer_generator",
    ),
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
        "seconds_per_epoch": seconds_per_epoch(run_dir, progress),
        **row,
    }


def seconds_per_epoch(run_dir: Path, progress: dict[str, Any]) -> float | None:
    """The training loop's seconds over the epochs it ran (whole and partial), from the batches
    per epoch that train.log reports; None without that line."""
    log = run_dir / "train.log"
    found = (
        re.search(r"(\d+) batches per epoch", log.read_text(encoding="utf-8"))
        if log.is_file()
        else None
    )
    if found is None or int(found.group(1)) == 0:
        return None
    epochs = progress["epoch"] + progress["batch_in_epoch"] / int(found.group(1))
    return progress["train_seconds"] / epochs if epochs > 0 else None


def experiment_of(model: Model, dataset: str) -> tuple[str, list[str]]:
    """The packaged experiment and extra overrides of a row; a hierarchical experiment that is
    not packaged for `dataset` is its attention experiment with the hierarchy switched on."""
    experiment = model.experiment.format(dataset=dataset)
    if not (CONFIG_DIR / "experiment" / f"{experiment}.yaml").is_file():
        return f"{dataset}_rnn_attention", [*model.overrides, HIERARCHY]
    return experiment, list(model.overrides)


def train_model(
    model: Model, dataset: str, args: argparse.Namespace
) -> tuple[dict[str, Any], list[Path]]:
    """A row trained once per seed (or once, with the config's seed): the mean scores and
    cost over the seeds, each seed's own in "seeds"; and the run folders."""
    experiment, extra = experiment_of(model, dataset)
    run_name = model.run.format(dataset=dataset)
    seeds = args.seeds or [None]
    runs, folders = [], []
    for seed in seeds:
        folder = args.out / (run_name if seed is None else f"{run_name}-seed{seed}")
        seed_overrides = [] if seed is None else [f"seed={seed}"]
        runs.append(
            train(experiment, folder, [*extra, *seed_overrides, *args.overrides], args.reuse)
        )
        folders.append(folder)
    if len(runs) == 1:
        return {"name": model.name, **runs[0]}, folders
    mean = {key: statistics.fmean(run[key] for run in runs) for key in (*COLUMNS, "minutes")}
    costs = [run["seconds_per_epoch"] for run in runs]
    return {
        "name": model.name,
        **runs[0],
        **mean,
        "seconds_per_epoch": None if None in costs else statistics.fmean(costs),
        "command": f"{runs[0]['command']} (seeds {', '.join(map(str, seeds))})",
        "seeds": [{"seed": seed, **run} for seed, run in zip(seeds, runs, strict=True)],
    }, folders


def segment_figure(checkpoint: Path, dataset: str, out: Path) -> Path:
    """The segment attention (segment x output step) of `checkpoint` over the first test
    source of `dataset`, segments labelled by the start of their text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnseq.analysis.alignment_view import AlignmentViewer
    from attnseq.analysis.figures import readable_token
    from attnseq.data.segments import split_segments

    cfg = data_config(dataset)
    source = load_splits(cfg.data, cfg.seed, ["test"])["test"][0][0]
    attention = AlignmentViewer(checkpoint).attention(source, kind="segment")
    weights = attention.weights.T  # (N, T): one row per segment
    texts = split_segments(source)
    labels = [f"{i + 1}: {texts[i][:48] if i < len(texts) else ''}" for i in range(len(weights))]
    width, height = 4.0 + 0.28 * weights.shape[1], 1.5 + 0.32 * weights.shape[0]
    figure, ax = plt.subplots(figsize=(min(width, 40.0), min(height, 40.0)), layout="constrained")
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    outputs = [readable_token(token) for token in attention.rows]
    ax.set_xticks(range(len(outputs)), outputs, rotation=90, fontsize=9)
    ax.set_xlabel("output step (token produced)")
    ax.set_ylabel("segment (speaker turn)")
    ax.set_title(f"segment attention, {dataset} test example 0", fontsize=10)
    figure.colorbar(image, ax=ax, shrink=0.8)
    figure.savefig(out, dpi=120)
    plt.close(figure)
    return out


def table(dataset: str, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"### {dataset}",
        "",
        "| model | ROUGE-1 | ROUGE-2 | ROUGE-L | repeated trigrams (%) | updates | minutes "
        "| s/epoch | cost vs attention |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    flat = next((row.get("seconds_per_epoch") for row in rows if row["name"] == "attention"), None)
    for row in rows:
        updates = f"{row['updates']:,}" if "updates" in row else ""
        minutes = f"{row['minutes']:.1f}" if "minutes" in row else ""
        cost = row.get("seconds_per_epoch")
        per_epoch = "" if cost is None else f"{cost:.1f}"
        relative = "" if cost is None or not flat else f"{cost / flat:.2f}x"
        cells = " | ".join(f"{row[key]:.2f}" for key in COLUMNS)
        lines.append(
            f"| {row['name']} | {cells} | {updates} | {minutes} | {per_epoch} | {relative} |"
        )
    lines += ["", "Commands:", ""]
    lines += [f"- {row['name']}: `{row['command']}`" for row in rows]
    return "\n".join(lines) + "\n"


def row_key(model: Model) -> str:
    """The name --models knows a row by: its run folder's name without the dataset."""
    return model.run.removeprefix("{dataset}_")


def chosen_models(args: argparse.Namespace) -> tuple[Model, ...]:
    """The rows to train: the flat ones, the hierarchical ones with --hierarchical, and of
    those only the --models given."""
    models = MODELS + (HIERARCHICAL_MODELS if args.hierarchical else ())
    if args.models is None:
        return models
    known = {row_key(model) for model in models}
    unknown = sorted(set(args.models) - known)
    if unknown:
        raise SystemExit(f"--models: unknown {unknown}; these runs know {sorted(known)}")
    return tuple(model for model in models if row_key(model) in args.models)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("compare_summarizers"))
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--reuse", action="store_true", help="keep finished runs")
    parser.add_argument("--lead-only", action="store_true", help="train nothing")
    parser.add_argument(
        "--hierarchical", action="store_true", help="also the hierarchical attention models"
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="train every model once per seed")
    parser.add_argument(
        "--figure", action="store_true", help="segment attention figure (with --hierarchical)"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        help="only these rows: rnn_attention pointer_generator hierarchical "
        "hierarchical_pointer_generator (default: all that the other options give)",
    )
    parser.add_argument("overrides", nargs="*", help="attnseq train overrides (after --)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {}
    report = []
    for dataset in args.datasets:
        rows = [lead_baseline(dataset)]
        for model in () if args.lead_only else chosen_models(args):
            row, folders = train_model(model, dataset, args)
            rows.append(row)
            if args.figure and model is HIERARCHICAL_MODELS[0]:
                checkpoint = folders[0] / "checkpoints" / "best.pt"
                figure = segment_figure(
                    checkpoint, dataset, args.out / f"segment_attention_{dataset}.png"
                )
                print(f"wrote {figure}", file=sys.stderr)
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
