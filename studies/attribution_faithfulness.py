"""Does attention explain? Word alignment, faithfulness, agreement and cost of every attribution
method of attnseq/alignment/attribution.py (attention, Shift-Att, rollout, gradient x input,
integrated gradients, SmoothGrad) on trained checkpoints. Trains nothing.

Usage (from the repository root; the page docs/results/attribution.md has the full commands):

    # AER against the gold links of a generated task's test split (reverse, toy_translation)
    python studies/attribution_faithfulness.py measure RUN/checkpoints/best.pt --name reverse/rnn
    # AER against gold files (WPT 2003 en-fr with an en->fr model)
    python studies/attribution_faithfulness.py measure best.pt --name wpt/transformer \\
        --gold-src $W/test.en --gold-tgt $W/test.fr --gold $W/test.sure.pharaoh \\
        --gold-possible $W/test.possible.pharaoh
    # deletion curves on the first 100 pairs of the checkpoint's test split (Multi30k)
    python studies/attribution_faithfulness.py measure best.pt --name multi30k/rnn \\
        --deletion --max-sentences 100
    # the table, the findings and the figure from the JSON alone
    python studies/attribution_faithfulness.py report

`measure` adds (or replaces) the entry NAME of --out (docs/results/attribution.json) and then
writes the report beside it: attribution_table.md (the tables), attribution_findings.md (the
answers in numbers, computed here) and attribution.png (the figure).

What is measured for each checkpoint, on the same sentence pairs for every method:

- alignment (a generated task with gold links, or --gold files): every method's (T + 1, S)
  source weights become word maps and argmax links through the pooling and the AER code of
  `attnseq align` (studies/faithfulness.py: `word_map`, `alignment_scores`).
  Attention is reported twice: the map chosen in advance (the last layer's head mean, as
  `attnseq align` and `eval --gold` use it) and, for transformers, the best layer/head by its
  AER on these very links (an oracle choice, tuned on the test gold: a ceiling, not a result);
  every layer's and head's AER is kept in the JSON.
- deletion (--deletion): the deletion curve of every method and of random orders
  (`deletion_curve`; --ks words masked, --mask token, one random permutation per sentence for
  each of --random-seeds, averaged), and its normalised area. For transformers every layer's
  head-mean attention also gets a curve; the best of them by area is the deletion oracle.
- agreement: for every other method, the share of target words (rows) whose top source word is
  the attention's (the map chosen in advance), and the mean Spearman rho of the rows.
- cost: seconds per sentence of each method's `attribute` call over all the pairs (batches of
  --batch-size), on --threads threads; the per-layer attention maps are not timed.

Exit status 2 with one message for a bad option, a checkpoint that does not load, a study the
checkpoint cannot do (no gold links, no data) or a method the model lacks.
"""

import argparse
import contextlib
import fcntl
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnseq.alignment.attribution import ATTRIBUTION_METHODS, attribute
from attnseq.config.threads import use_threads
from attnseq.data.word_alignments import Link, read_gold_links, read_parallel_lines, word_ids
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write_json, atomic_write_text
from attnseq.models.loading import TrainedModel, load_trained_model

sys.path.insert(0, str(Path(__file__).resolve().parent))  # faithfulness.py, next to this file
from faithfulness import (  # noqa: E402
    MASK_TOKENS,
    DeletionCurve,
    agreement,
    alignment_scores,
    deletion_curve,
    mask_id_of,
    random_ranking,
    ranking,
    source_word_scores,
    word_map,
)

OUT = Path("docs/results/attribution.json")
ATTENTION = "attention"
GRADIENT_METHODS = ("gradient-x-input", "integrated-gradients", "smoothgrad")
# the table's order; "attention-best" is the oracle layer/head, "random" the deletion baseline
METHOD_ORDER = (ATTENTION, "attention-best", "shift-att", "rollout", *GRADIENT_METHODS)
LABELS = {
    ATTENTION: "attention (chosen in advance)",
    "attention-best": "attention (best layer/head: oracle)",
    "shift-att": "Shift-Att",
    "rollout": "attention rollout",
    "gradient-x-input": "gradient x input",
    "integrated-gradients": "integrated gradients",
    "smoothgrad": "SmoothGrad",
    "random": "random order",
}


# ------------------------------------------------------------------------------ the options
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    measure = commands.add_parser("measure", help="measure one checkpoint into --out")
    measure.add_argument("checkpoint", type=Path)
    measure.add_argument("--name", required=True, help="the entry, e.g. wpt/transformer")
    measure.add_argument("--gold-src", type=Path)
    measure.add_argument("--gold-tgt", type=Path)
    measure.add_argument("--gold", type=Path, help="Pharaoh or NAACL links (source word first)")
    measure.add_argument("--gold-possible", type=Path)
    measure.add_argument("--deletion", action="store_true", help="deletion curves (no gold)")
    measure.add_argument("--split", default="test", help="the split of --deletion")
    measure.add_argument("--max-sentences", type=int, help="the first N pairs only")
    measure.add_argument("--methods", default=",".join(m for m in ATTRIBUTION_METHODS))
    measure.add_argument("--ks", default="0,1,2,3,4,5", help="words masked, ascending from 0")
    measure.add_argument("--mask", default="pad", help="pad or unk")
    measure.add_argument("--random-seeds", default="0,1,2")
    measure.add_argument("--batch-size", type=int, default=16)
    measure.add_argument("--ig-steps", type=int, default=32)
    measure.add_argument("--smoothgrad-samples", type=int, default=16)
    measure.add_argument("--smoothgrad-noise", type=float, default=0.1)
    measure.add_argument("--seed", type=int, default=0, help="SmoothGrad's noise")
    measure.add_argument("--threads", type=int, default=1)
    for sub in (measure, commands.add_parser("report", help="tables and figure from --out")):
        sub.add_argument("--out", type=Path, default=OUT, help="the JSON (report beside it)")
    return parser.parse_args(argv)


def integers(text: str, option: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise UserError(f"{option} takes integers separated by commas, got {text!r}") from None


def chosen_methods(text: str, trained: TrainedModel) -> list[str]:
    """The --methods list, canonical names, rollout left out for a model that is no
    transformer (attribute refuses it there)."""
    methods = []
    for name in (item.strip() for item in text.split(",") if item.strip()):
        name = "smoothgrad" if name == "saliency" else name
        if name not in ATTRIBUTION_METHODS:
            raise UserError(
                f"--methods: unknown method {name!r}; valid: {', '.join(ATTRIBUTION_METHODS)}"
            )
        if name == "rollout" and not is_transformer(trained):
            continue
        if name not in methods:
            methods.append(name)
    if ATTENTION not in methods:
        methods.insert(0, ATTENTION)  # agreement is measured against it
    return methods


def is_transformer(trained: TrainedModel) -> bool:
    return trained.cfg.model.family.value == "transformer"


# ------------------------------------------------------------------------------ the pairs
@dataclass
class Gold:
    """Gold links of the pairs, (source word, target word)."""

    sure: list[set[Link]]
    possible: list[set[Link]]


def generated_pairs(trained: TrainedModel) -> tuple[list[tuple[str, str]], Gold] | None:
    """The test split of a generated task with its gold links (as validation scores them), or
    None for a task without them."""
    from attnseq.config.choices import DataSource
    from attnseq.data.generated import gold_alignments, make_splits

    data = trained.cfg.data
    if data.source is not DataSource.generated:
        return None
    sizes = {"train": data.train_size, "valid": data.valid_size, "test": data.test_size}
    lengths = {"min_len": data.min_len, "max_len": data.max_len, "vocab_size": data.vocab_size}
    gold = gold_alignments(data.name, sizes, trained.cfg.seed, **lengths)
    if gold is None:
        return None
    pairs = make_splits(data.name, sizes, trained.cfg.seed, **lengths)["test"]
    return list(pairs), Gold(gold["test"], gold["test"])


def gold_file_pairs(args: argparse.Namespace) -> tuple[list[tuple[str, str]], Gold]:
    """The --gold-src/--gold-tgt pairs and their --gold (and --gold-possible) links."""
    if args.gold_src is None or args.gold_tgt is None:
        raise UserError("--gold needs --gold-src and --gold-tgt (the sentence files)")
    src, tgt = read_parallel_lines(("--gold-src", args.gold_src), ("--gold-tgt", args.gold_tgt))
    sure, possible = read_gold_links(
        args.gold,
        args.gold_possible,
        "auto",
        "src-tgt",
        src,
        tgt,
        what=f"--gold {args.gold}",
        order_option="--gold-order",
    )
    return list(zip(src, tgt, strict=True)), Gold(sure, possible)


def split_pairs(trained: TrainedModel, split: str) -> list[tuple[str, str]]:
    """The text pairs of one split of the checkpoint's data, in the split's order."""
    from attnseq.data.prepare import prepare_data

    data = prepare_data(
        trained.cfg.data, trained.cfg.seed, tokenizers=trained.tokenizers, splits=[split]
    )
    pairs = data.pairs.get(split)
    if not pairs:
        raise UserError(f"split {split!r} of the checkpoint's data has no pairs")
    return list(pairs)


# ------------------------------------------------------------------------------ measuring
def attribute_timed(trained, pairs, method: str, args, **kwargs) -> tuple[list[Any], float]:
    """attribute(...) of every pair and its seconds per sentence."""
    start = time.perf_counter()
    result = attribute(
        trained,
        pairs,
        method,
        batch_size=args.batch_size,
        ig_steps=args.ig_steps,
        smoothgrad_samples=args.smoothgrad_samples,
        smoothgrad_noise=args.smoothgrad_noise,
        seed=args.seed,
        **kwargs,
    )
    return result, (time.perf_counter() - start) / len(pairs)


def kinds(trained: TrainedModel) -> tuple[str, str]:
    return type(trained.tokenizers.src).kind, type(trained.tokenizers.tgt).kind


def word_maps(trained: TrainedModel, attributions: Sequence[Any]) -> list[torch.Tensor]:
    """Each pair's (Tw, Sw) word map of one method."""
    src_kind, tgt_kind = kinds(trained)
    return [
        word_map(a.source, a.source_pieces, a.target_pieces, src_kind, tgt_kind)
        for a in attributions
    ]


def layer_maps(trained: TrainedModel, pairs, args) -> dict[str, list[Any]]:
    """Attention attributions of every transformer layer and head ("layerL/headH") and of each
    layer's head mean ("layerL/mean"); none for an RNN (its one map is the chosen one)."""
    if not is_transformer(trained):
        return {}
    model = trained.cfg.model
    maps: dict[str, list[Any]] = {}
    for layer in range(1, model.dec_layers + 1):
        for head in [*range(1, model.heads + 1), None]:
            key = f"layer{layer}/" + ("mean" if head is None else f"head{head}")
            maps[key] = attribute(
                trained, pairs, ATTENTION, layer=layer, head=head, batch_size=args.batch_size
            )
    return maps


def measure_alignment(trained, pairs, gold: Gold, results, args) -> dict[str, Any]:
    """AER of every method (`results`: method -> attributions) and of every attention map."""
    methods: dict[str, Any] = {}
    for method, attributions in results.items():
        scores, _ = alignment_scores(word_maps(trained, attributions), gold.sure, gold.possible)
        methods[method] = {key: scores[key] for key in ("aer", "precision", "recall")}
    per_map = {}
    for key, attributions in layer_maps(trained, pairs, args).items():
        scores, _ = alignment_scores(word_maps(trained, attributions), gold.sure, gold.possible)
        per_map[key] = {name: scores[name] for name in ("aer", "precision", "recall")}
    if per_map:
        best = min(per_map, key=lambda key: per_map[key]["aer"])
        methods["attention-best"] = {**per_map[best], "map": best}
    return {"methods": methods, "attention_maps": per_map}


def encoded(trained: TrainedModel, pairs, attributions) -> tuple[list, list[list[int]]]:
    """(source ids, target ids) of each pair and its source pieces' word ids, checked against
    the pieces the attributions name."""
    src_tok, tgt_tok = trained.tokenizers.src, trained.tokenizers.tgt
    examples, words = [], []
    for (src, tgt), a in zip(pairs, attributions, strict=True):
        src_ids, tgt_ids = src_tok.encode(src), tgt_tok.encode(tgt)
        if len(src_ids) != len(a.source_pieces) or len(tgt_ids) != len(a.target_pieces):
            raise UserError(f"the pair {src!r} encodes to other pieces than its attribution")
        examples.append((src_ids, tgt_ids))
        words.append(word_ids(a.source_pieces, type(src_tok).kind))
    return examples, words


def measure_deletion(trained, pairs, results, args) -> dict[str, Any]:
    """The deletion curve of every method, of each transformer layer's attention, and of
    random orders (their mean curve and each seed's area)."""
    ks = integers(args.ks, "--ks")
    mask_id = mask_id_of(trained.model, args.mask, trained.tokenizers.src.unk_id)
    examples, words = encoded(trained, pairs, next(iter(results.values())))

    def curve(rankings):
        return deletion_curve(
            trained.model,
            examples,
            words,
            rankings,
            ks,
            mask_id=mask_id,
            batch_size=max(args.batch_size, 32),
        )

    def method_curve(attributions):
        return curve(
            [
                ranking(source_word_scores(a.source, w))
                for a, w in zip(attributions, words, strict=True)
            ]
        )

    curves = {method: method_curve(a).as_dict() for method, a in results.items()}
    if is_transformer(trained):
        model = trained.cfg.model
        layers = {
            f"layer{layer}/mean": method_curve(
                attribute(trained, pairs, ATTENTION, layer=layer, batch_size=args.batch_size)
            ).as_dict()
            for layer in range(1, model.dec_layers + 1)
        }
        best = max(layers, key=lambda key: layers[key]["area"])
        curves["attention-best"] = {**layers[best], "map": best}
        curves["attention_layers"] = layers
    seeds = integers(args.random_seeds, "--random-seeds")
    random_curves = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        rankings = [
            random_ranking(len(t) + 1, max(w) + 1, generator)
            for (_, t), w in zip(examples, words, strict=True)
        ]
        random_curves.append(curve(rankings))
    mean = [sum(c.drops[i] for c in random_curves) / len(seeds) for i in range(len(ks))]
    curves["random"] = {
        **DeletionCurve(tuple(ks), tuple(mean), random_curves[0].steps).as_dict(),
        "seeds": seeds,
        "seed_areas": [c.area for c in random_curves],
    }
    return {"ks": ks, "mask": args.mask, "curves": curves}


def check_options(args: argparse.Namespace) -> None:
    """UserError for option values that cannot work, before anything is loaded."""
    ks = integers(args.ks, "--ks")
    if not ks or ks[0] != 0 or ks != sorted(set(ks)):
        raise UserError(f"--ks must start at 0 and ascend, got {args.ks!r}")
    if args.mask not in MASK_TOKENS:
        raise UserError(f"--mask must be one of {', '.join(MASK_TOKENS)}, got {args.mask!r}")
    if not integers(args.random_seeds, "--random-seeds"):
        raise UserError("--random-seeds needs at least one seed")
    for option in ("batch_size", "ig_steps", "smoothgrad_samples", "threads"):
        if getattr(args, option) < 1:
            raise UserError(f"--{option.replace('_', '-')} must be at least 1")
    if args.max_sentences is not None and args.max_sentences < 1:
        raise UserError("--max-sentences must be at least 1")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One checkpoint's entry (the module docstring says what it holds)."""
    check_options(args)
    use_threads(args.threads)
    trained = load_trained_model(args.checkpoint)
    trained.model.to("cpu")
    methods = chosen_methods(args.methods, trained)
    gold: Gold | None = None
    found = gold_file_pairs(args) if args.gold is not None else generated_pairs(trained)
    if found is not None:
        pairs, gold = found
    elif args.deletion:
        pairs = split_pairs(trained, args.split)
    else:
        raise UserError("the checkpoint's data has no gold links: give --gold files or --deletion")
    if args.max_sentences:
        pairs = pairs[: args.max_sentences]
        if gold is not None:
            gold = Gold(gold.sure[: len(pairs)], gold.possible[: len(pairs)])
    results, seconds = {}, {}
    for method in methods:
        results[method], seconds[method] = attribute_timed(trained, pairs, method, args)
    entry = describe(trained, args, len(pairs))
    entry["seconds_per_sentence"] = seconds
    attention_maps = word_maps(trained, results[ATTENTION])
    entry["agreement_with_attention"] = {
        method: agreement(attention_maps, word_maps(trained, attributions))
        for method, attributions in results.items()
        if method != ATTENTION
    }
    if gold is not None:
        entry["alignment"] = measure_alignment(trained, pairs, gold, results, args)
    if args.deletion:
        entry["deletion"] = measure_deletion(trained, pairs, results, args)
    return entry


RUN_METRICS = ("test/exact_match", "test/bleu")


def run_metrics(checkpoint: Path) -> dict[str, float]:
    """The test scores training wrote beside the checkpoint (RUN/metrics.json for
    RUN/checkpoints/best.pt), to say how well each measured model learned its task; {} when
    there is no such file."""
    path = Path(checkpoint).parent.parent / "metrics.json"
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {key: metrics[key] for key in RUN_METRICS if isinstance(metrics.get(key), float)}


def describe(trained: TrainedModel, args: argparse.Namespace, sentences: int) -> dict[str, Any]:
    """What produced an entry: the checkpoint, its model and training step, the settings, the
    host."""
    model = trained.cfg.model
    if is_transformer(trained):
        shape = f"transformer {model.enc_layers}+{model.dec_layers} layers, d_model "
        shape += f"{model.d_model}, {model.heads} heads"
    else:
        shape = f"RNN ({model.rnn.cell.value}, {model.attention.score.value} attention)"
    return {
        "checkpoint": str(args.checkpoint),
        "model": shape,
        "family": model.family.value,
        "experiment": trained.cfg.name,
        "step": (trained.payload.get("progress") or {}).get("step"),
        "run_metrics": run_metrics(args.checkpoint),
        "sentences": sentences,
        "settings": {
            key: getattr(args, key)
            for key in (
                "batch_size",
                "ig_steps",
                "smoothgrad_samples",
                "smoothgrad_noise",
                "seed",
                "threads",
                "max_sentences",
                "split",
            )
        },
        "host": {
            "cores": os.cpu_count(),
            "load_average": os.getloadavg()[0],
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "command": " ".join(["python", "studies/attribution_faithfulness.py", *sys.argv[1:]]),
    }


# ------------------------------------------------------------------------------- the report
def read_report(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"--out {path} is not a readable JSON report: {error}") from None


def cell(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def ordered(entries: dict[str, Any], section: str) -> list[str]:
    return [name for name in sorted(entries) if section in entries[name]]


def methods_in(entries: dict[str, Any], names: list[str], value) -> list[str]:
    present = {m for name in names for m in value(entries[name])}
    return [m for m in (*METHOD_ORDER, "random") if m in present]


def table(title: str, names: list[str], rows: list[tuple[str, list[str]]]) -> list[str]:
    lines = [f"| {title} | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return lines + [""]


def alignment_table(entries: dict[str, Any]) -> list[str]:
    return method_table(entries, ("alignment", "methods"), "aer", "AER (lower is better)")


def deletion_table(entries: dict[str, Any]) -> list[str]:
    title = "deletion area, nats (higher is more faithful)"
    return method_table(entries, ("deletion", "curves"), "area", title)


def method_table(
    entries: dict[str, Any], where: tuple[str, str], number: str, title: str
) -> list[str]:
    """One row per method, one column per entry holding `where` (section, results): the
    method's `number`, with the attention map it came from when the oracle chose one."""
    section, results = where
    names = ordered(entries, section)
    methods = methods_in(entries, names, lambda e: e[section][results])

    def value(name, method):
        found = entries[name][section][results].get(method)
        text = cell(found[number]) if found else "–"
        if found and "map" in found:  # "layer2/head3" -> "L2 H3", "layer2/mean" -> "L2 mean"
            short = found["map"].replace("layer", "L").replace("/head", " H")
            text += f" ({short.replace('/mean', ' mean')})"
        return text

    rows = [(LABELS[m], [value(n, m) for n in names]) for m in methods]
    return table(title, names, rows)


def cost_table(entries: dict[str, Any]) -> list[str]:
    names = sorted(entries)
    methods = methods_in(entries, names, lambda e: e["seconds_per_sentence"])
    rows = [
        (LABELS[m], [cell(entries[n]["seconds_per_sentence"].get(m), 4) for n in names])
        for m in methods
    ]
    return table("seconds per sentence", names, rows)


def agreement_table(entries: dict[str, Any]) -> list[str]:
    names = sorted(entries)
    methods = methods_in(entries, names, lambda e: e["agreement_with_attention"])

    def value(name, method):
        found = entries[name]["agreement_with_attention"].get(method)
        return f"{cell(found['argmax'], 2)} / {cell(found['spearman'], 2)}" if found else "–"

    rows = [(LABELS[m], [value(n, m) for n in names]) for m in methods]
    return table("same top word / Spearman rho, against attention", names, rows)


def layer_table(entries: dict[str, Any]) -> list[str]:
    lines = []
    for name in ordered(entries, "alignment"):
        maps = entries[name]["alignment"]["attention_maps"]
        if not maps:
            continue
        layers = sorted({key.split("/")[0] for key in maps}, key=lambda k: int(k[5:]))
        heads = sorted(
            {key.split("/")[1] for key in maps if key.split("/")[1] != "mean"},
            key=lambda k: int(k[4:]),
        )
        rows = [
            (layer[5:], [cell(maps[f"{layer}/{h}"]["aer"]) for h in [*heads, "mean"]])
            for layer in layers
        ]
        lines += table(f"{name}: AER by layer", [*[f"head {h[4:]}" for h in heads], "mean"], rows)
    return lines


def models_table(entries: dict[str, Any]) -> list[str]:
    def settings(entry):
        values = entry["settings"]
        return f"{values['ig_steps']} / {values['smoothgrad_samples']}"

    def learned(entry):
        found = entry.get("run_metrics") or run_metrics(Path(entry["checkpoint"]))
        entry["run_metrics"] = found  # kept in the JSON once read
        return " / ".join(cell(found.get(key), 3 if "exact" in key else 1) for key in RUN_METRICS)

    rows = [
        (name, [e["model"], e["experiment"], str(e["step"]), learned(e), str(e["sentences"]),
                settings(e), f"{e['host']['load_average']:.1f}"])
        for name, e in sorted(entries.items())
    ]  # fmt: skip
    columns = ["model", "experiment", "updates", "test exact match / BLEU", "pairs"]
    columns.append("IG steps / SmoothGrad samples")
    return table("entry", [*columns, "load at start"], rows)


def render_tables(entries: dict[str, Any]) -> str:
    """Every table that has rows, each under its bold title."""
    sections = [
        ("Models and pairs", models_table(entries)),
        ("Alignment error rate against gold links", alignment_table(entries)),
        ("Deletion curves", deletion_table(entries)),
        ("Agreement with attention", agreement_table(entries)),
        ("Cost", cost_table(entries)),
        ("Attention by layer and head", layer_table(entries)),
    ]
    parts = []
    for title, lines in sections:
        if len(lines) > 3:  # a header, its rule and a blank line hold no row
            parts += [f"**{title}**", "", *lines]
    return "\n".join(parts)


def findings(entries: dict[str, Any]) -> str:
    """The answers in numbers, one bullet per entry and question."""
    lines = []
    for name in ordered(entries, "alignment"):
        methods = entries[name]["alignment"]["methods"]
        fair = {m: v["aer"] for m, v in methods.items() if m != "attention-best"}
        best = min(fair, key=fair.get)
        line = f"- **{name}**: lowest AER {LABELS[best]} {fair[best]:.3f}; attention chosen in "
        line += f"advance {fair[ATTENTION]:.3f}"
        if "attention-best" in methods:
            line += f", its best map by AER {methods['attention-best']['aer']:.3f}"
        gradients = {m: fair[m] for m in GRADIENT_METHODS if m in fair}
        if gradients:
            top = min(gradients, key=gradients.get)
            delta = gradients[top] - fair[ATTENTION]
            verdict = "beats attention by" if delta < 0 else "trails attention by"
            line += (
                f"; the best gradient method, {LABELS[top]} ({gradients[top]:.3f}), "
                f"{verdict} {abs(delta):.3f} AER"
            )
        lines.append(line + ".")
    for name in ordered(entries, "deletion"):
        curves = entries[name]["deletion"]["curves"]
        areas = {m: c["area"] for m, c in curves.items() if m in LABELS and m != "attention-best"}
        best = max(areas, key=areas.get)
        lines.append(
            f"- **{name}**: most faithful by deletion area {LABELS[best]} ({areas[best]:.3f} "
            f"nats); attention {areas.get(ATTENTION, math.nan):.3f}, random order "
            f"{areas['random']:.3f}."
        )
    for name, entry in sorted(entries.items()):
        seconds = entry["seconds_per_sentence"]
        ratio = {m: s / seconds[ATTENTION] for m, s in seconds.items() if m != ATTENTION}
        costly = max(ratio, key=ratio.get) if ratio else ATTENTION
        agree = entry["agreement_with_attention"]
        spread = ", ".join(
            f"{LABELS[m]} {v['argmax']:.2f}" for m, v in agree.items() if m in GRADIENT_METHODS
        )
        lines.append(
            f"- **{name}** cost: attention {seconds[ATTENTION]:.4f} s per sentence, "
            f"{LABELS[costly]} {ratio.get(costly, 1.0):.0f} times that; top word shared with "
            f"attention: {spread or 'no gradient method'}."
        )
    return "\n".join(lines) + "\n"


def color(method: str) -> str:
    """One colour per method in every panel (matplotlib's cycle, grey for random)."""
    order = [*METHOD_ORDER, "random"]
    return "0.45" if method == "random" else f"C{order.index(method)}"


def figure(entries: dict[str, Any], path: Path) -> None:
    """AER per method and entry (bars), and each deletion entry's curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnseq.analysis.figures import save_figure

    aligned, deleted = ordered(entries, "alignment"), ordered(entries, "deletion")
    panels = 1 + len(deleted) if aligned else len(deleted)
    fig, axes = plt.subplots(1, max(panels, 1), figsize=(6 * max(panels, 1), 5.6), squeeze=False)
    axes = list(axes[0])
    if aligned:
        ax = axes.pop(0)
        methods = methods_in(entries, aligned, lambda e: e["alignment"]["methods"])
        width = 0.8 / len(methods)
        for i, method in enumerate(methods):
            values = [
                entries[n]["alignment"]["methods"].get(method, {}).get("aer", math.nan)
                for n in aligned
            ]
            ax.bar(
                [j + i * width for j in range(len(aligned))], values, width, label=LABELS[method],
                color=color(method),
            )  # fmt: skip
        ax.set_xticks(
            [j + 0.4 - width / 2 for j in range(len(aligned))], aligned, rotation=20, fontsize=8
        )
        ax.set_ylabel("AER (lower is better)")
        ax.set_title("Alignment against gold links")
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    for ax, name in zip(axes, deleted, strict=True):
        curves = entries[name]["deletion"]["curves"]
        for method in [m for m in (*METHOD_ORDER, "random") if m in curves]:
            style = "--" if method == "random" else "-"
            ax.plot(
                curves[method]["ks"],
                curves[method]["drops"],
                style,
                marker="o",
                markersize=3,
                label=f"{LABELS[method]} ({curves[method]['area']:.3f})",
                color=color(method),
            )
        ax.set_xlabel("top-k source words masked")
        ax.set_ylabel("drop of log p(reference token), nats")
        ax.set_title(f"Deletion: {name}")
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def write_report(path: Path, entries: dict[str, Any]) -> None:
    """The JSON, and beside it the tables, the findings and the figure."""
    tables = render_tables(entries)  # fills in run_metrics an older entry lacks
    atomic_write_json(path, entries)
    atomic_write_text(path.with_name(path.stem + "_table.md"), tables)
    atomic_write_text(path.with_name(path.stem + "_findings.md"), findings(entries))
    figure(entries, path.with_suffix(".png"))


@contextlib.contextmanager
def report_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on the report's folder while it is read and rewritten, so that
    measurements of several checkpoints running at once each add their entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # releases the lock


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        read_report(args.out)  # a broken report is an error before any work
        entry = measure(args) if args.command == "measure" else None
        with report_lock(args.out):
            entries = read_report(args.out)
            if entry is not None:
                entries[args.name] = entry
            elif not entries:
                raise UserError(f"--out {args.out} holds no measurements yet: run `measure` first")
            write_report(args.out, entries)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
