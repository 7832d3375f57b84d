"""Head pruning curve (Michel et al. 2019, "Are Sixteen Heads Really Better than One?", NeurIPS;
section 4, Figure 3): test BLEU of a transformer checkpoint with 0, 10, ..., 60 % of its attention
heads masked, the heads ranked by each importance measure of `attnseq heads` (gradient, ablation;
attnseq/analysis/head_importance.py) against random rankings, and the time per sentence of the
pruned models. Trains nothing.

Usage (from the repository root):

    # the Multi30k transformer (about 60 minutes on 2 CPU cores; trainer.max_steps=1000 for ~15)
    ATTNSEQ_DATA=/work/shared/data .venv/bin/attnseq train config=multi30k_transformer
    ATTNSEQ_DATA=/work/shared/data .venv/bin/python studies/prune_heads_curve.py \\
        outputs/DATE/TIME/checkpoints/best.pt --out results/prune_heads

Importance is measured once on --importance-split (valid) with the unpruned model, as Michel et
al. do; every pruning level masks the lowest-ranked heads (every attention sublayer keeps at
least one head, attnseq/models/head_mask.py) and decodes --eval-split (test) with the
checkpoint's decoding settings (`key=value` overrides after the options change them, e.g.
decoding.beam=5). Random rankings: one row per --random-seeds seed; the table shows their mean
and range.

Time per sentence: `masked` decodes with the head mask (masked heads are still computed, so
the time hardly moves); `compacted` removes the masked heads from the weights
(`compact_heads`, attnseq/models/head_mask.py) and decodes the same sentences again, which is what
pruning buys in speed; `compact_same_outputs` is the fraction of identical outputs of the two
(1.0 up to rounding ties). Each model is warmed up before it is timed.

Writes OUT/curve.json (every row), OUT/curve.md (the table), OUT/curve.png (BLEU and time per
sentence against the fraction pruned) and OUT/importance.json (the scores of `attnseq heads`).
Exit status 2 with one message for a checkpoint without heads or a bad option.
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnseq.analysis.head_importance import HeadImportance, head_importance
from attnseq.config.devices import resolve_device
from attnseq.data.prepare import prepare_data
from attnseq.errors import UserError
from attnseq.evaluation.evaluator import Evaluator, make_evaluator
from attnseq.evaluation.metrics import task_metrics
from attnseq.io.atomic import atomic_write_json, atomic_write_text
from attnseq.models.head_mask import (
    attention_sites,
    compact_heads,
    prune_count,
    prune_masks,
    random_scores,
    set_head_masks,
)
from attnseq.models.loading import load_trained_model

MEASURES = ("gradient", "ablation")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint", type=Path, help="a transformer checkpoint")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of its config")
    parser.add_argument("--out", type=Path, default=Path("results/prune_heads"))
    parser.add_argument("--fractions", default="0,0.1,0.2,0.3,0.4,0.5,0.6")
    parser.add_argument("--random-seeds", default="0,1,2", help="one random ranking per seed")
    parser.add_argument("--importance-split", default="valid")
    parser.add_argument("--eval-split", default="test")
    parser.add_argument("--max-batches", type=int, help="importance from the first N batches")
    parser.add_argument("--max-sentences", type=int, help="decode only the first N sentences")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--threads", type=int, help="torch intra-op threads")
    return parser.parse_args(argv)


def fractions_of(text: str) -> list[float]:
    """0 and fractions in (0, 1), ascending."""
    try:
        values = sorted({float(item) for item in text.split(",")})
    except ValueError:
        raise UserError(f"--fractions takes numbers separated by commas, got {text!r}") from None
    if any(not 0 <= value < 1 for value in values):
        raise UserError(f"--fractions must lie in [0, 1), got {text!r}")
    return values


def split_evaluators(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The loaded checkpoint (model on its device) and evaluators of the two splits."""
    trained = load_trained_model(args.checkpoint, args.overrides)
    attention_sites(trained.model)  # UserError for a model without heads
    cfg = trained.cfg
    device = resolve_device(cfg.trainer.device if args.device == "auto" else args.device)
    trained.model.to(device)
    splits = [args.importance_split, args.eval_split]
    data = prepare_data(cfg.data, cfg.seed, tokenizers=trained.tokenizers, splits=splits)
    for split in splits:
        if not data.examples.get(split):
            raise UserError(f"split {split!r} has no examples in this dataset")
    if args.max_sentences:
        data.examples[args.eval_split] = data.examples[args.eval_split][: args.max_sentences]
        data.pairs[args.eval_split] = data.pairs[args.eval_split][: args.max_sentences]
    scorer = make_evaluator(cfg, data, args.importance_split, device)
    if args.max_batches:
        scorer.batches = scorer.batches[: args.max_batches]
    decoder = make_evaluator(cfg, data, args.eval_split, device)
    decoder.label = None  # no progress bar per point
    return trained, scorer, decoder


def timed_decode(evaluator: Evaluator, model: torch.nn.Module) -> tuple[list[str], float]:
    """Outputs and seconds per sentence; one warm-up decode of the first batch first."""
    warm = evaluator.batches
    evaluator.batches = warm[:1]
    with torch.no_grad():
        evaluator.decode(model)
    evaluator.batches = warm
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        texts = evaluator.texts(evaluator.decode(model))
    return texts, (time.perf_counter() - start) / max(len(texts), 1)


def measure_point(evaluator: Evaluator, model: torch.nn.Module) -> dict[str, Any]:
    """BLEU, loss and time per sentence of the model as masked, then compacted."""
    texts, seconds = timed_decode(evaluator, model)
    scored = evaluator.scored
    metrics = task_metrics(
        evaluator.task, [texts[i] for i in scored], [evaluator.references[i] for i in scored]
    )
    row = {key: metrics[key] for key in ("bleu", "chrf", "rouge_l") if key in metrics}
    row["loss"] = evaluator.loss(model)
    row["ms_per_sentence"] = 1000 * seconds
    compact = copy.deepcopy(model)
    compact_heads(compact)
    compact_texts, compact_seconds = timed_decode(evaluator, compact)
    row["compact_ms_per_sentence"] = 1000 * compact_seconds
    same = sum(a == b for a, b in zip(texts, compact_texts, strict=True))
    row["compact_same_outputs"] = same / max(len(texts), 1)
    return row


def curve(
    model: torch.nn.Module,
    importance: HeadImportance,
    evaluator: Evaluator,
    fractions: list[float],
    seeds: list[int],
) -> list[dict[str, Any]]:
    """One row per (ranking, fraction); fraction 0 is measured once and shared."""
    sites = attention_sites(model)
    total = sum(site.attention.heads for site in sites)
    counts = {f: 0 if f == 0 else prune_count(str(f), total, len(sites)) for f in fractions}
    rankings = [(m, None, importance.scores(m)) for m in MEASURES]
    rankings += [("random", s, random_scores(importance.masks, s)) for s in seeds]
    rows, unpruned = [], None
    for fraction in fractions:
        for measure, seed, scores in rankings:
            if counts[fraction] == 0 and unpruned is not None:
                rows.append({**unpruned, "measure": measure, "seed": seed})
                continue
            set_head_masks(model, prune_masks(scores, counts[fraction], importance.masks))
            row = {"measure": measure, "seed": seed, "fraction": fraction,
                   "pruned": counts[fraction], "heads": total}  # fmt: skip
            row.update(measure_point(evaluator, model))
            label = measure if seed is None else f"{measure} seed {seed}"
            print(f"{label}, {fraction:.0%} pruned: BLEU {row.get('bleu')}", file=sys.stderr)
            rows.append(row)
            if counts[fraction] == 0:
                unpruned = row
    set_head_masks(model, importance.masks)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: BLEU per ranking (random: mean and range) and the mean times per fraction."""
    lines = [
        "| pruned | heads | BLEU gradient | BLEU ablation | BLEU random (mean, min-max) "
        "| ms/sentence masked | ms/sentence compacted |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fraction in sorted({row["fraction"] for row in rows}):
        at = [row for row in rows if row["fraction"] == fraction]
        bleu = {m: next(r["bleu"] for r in at if r["measure"] == m) for m in MEASURES}
        random = [r["bleu"] for r in at if r["measure"] == "random"]
        random_cell = (
            f"{statistics.mean(random):.2f} ({min(random):.2f}-{max(random):.2f})"
            if random
            else "-"
        )
        masked = statistics.mean(r["ms_per_sentence"] for r in at)
        compacted = statistics.mean(r["compact_ms_per_sentence"] for r in at)
        lines.append(
            f"| {fraction:.0%} | {at[0]['pruned']}/{at[0]['heads']} | {bleu['gradient']:.2f} "
            f"| {bleu['ablation']:.2f} | {random_cell} | {masked:.1f} | {compacted:.1f} |"
        )
    return "\n".join(lines) + "\n"


def figure(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """BLEU and compacted time per sentence against the percentage of heads pruned."""
    from matplotlib.figure import Figure

    from attnseq.analysis.figures import save_figure

    fig = Figure(figsize=(11, 4.2))
    bleu_axis, time_axis = fig.subplots(1, 2)
    fractions = sorted({row["fraction"] for row in rows})
    percent = [100 * f for f in fractions]
    for measure in (*MEASURES, "random"):
        chosen = [[r for r in rows if r["measure"] == measure and r["fraction"] == f]
                  for f in fractions]  # fmt: skip
        bleu = [statistics.mean(r["bleu"] for r in at) for at in chosen]
        (line,) = bleu_axis.plot(percent, bleu, marker="o", label=measure)
        if measure == "random" and chosen and len(chosen[0]) > 1:
            low = [min(r["bleu"] for r in at) for at in chosen]
            high = [max(r["bleu"] for r in at) for at in chosen]
            bleu_axis.fill_between(percent, low, high, alpha=0.2, color=line.get_color())
        compact = [statistics.mean(r["compact_ms_per_sentence"] for r in at) for at in chosen]
        time_axis.plot(percent, compact, marker="o", label=f"{measure}, compacted")
    masked = [statistics.mean(r["ms_per_sentence"] for r in rows if r["fraction"] == f)
              for f in fractions]  # fmt: skip
    time_axis.plot(percent, masked, linestyle="--", color="gray", label="masked (all rankings)")
    bleu_axis.set(xlabel="% of heads pruned", ylabel="test BLEU", title="BLEU")
    time_axis.set(xlabel="% of heads pruned", ylabel="ms per sentence", title="decoding time")
    bleu_axis.legend()
    time_axis.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        fractions = fractions_of(args.fractions)
        seeds = [int(seed) for seed in args.random_seeds.split(",") if seed.strip()]
        trained, scorer, decoder = split_evaluators(args)
        model = trained.model
        importance = head_importance(model, scorer.scored_batches(model), args.importance_split)
        rows = curve(model, importance, decoder, fractions, seeds)
    except (UserError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "importance.json", importance.to_json())
    report = {"checkpoint": str(args.checkpoint), "device": str(next(model.parameters()).device),
              "threads": torch.get_num_threads(), "eval_split": args.eval_split,
              "sentences": len(decoder.examples), "rows": rows}  # fmt: skip
    atomic_write_json(args.out / "curve.json", report)
    markdown = table(rows)
    atomic_write_text(args.out / "curve.md", markdown)
    title = f"pruning heads of {args.checkpoint.name}: {args.eval_split}, {len(decoder.examples)}"
    figure(rows, args.out / "curve.png", title + " sentences")
    print(markdown)
    print(f"wrote {args.out}/curve.json, curve.md, curve.png, importance.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
