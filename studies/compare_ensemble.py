"""An ensemble against each of its members: BLEU and chrF of every checkpoint alone and of all
together, on one split, for each beam size. Prints a Markdown table (and, with --json, the
figures as JSON); every evaluation also keeps its `attnseq eval` result folder.

Usage (from the repository root), e.g. two 15-minute Multi30k transformers of different seeds:

    ATTNSEQ_DATA=../shared/data .venv/bin/python studies/compare_ensemble.py \\
        runs/m30kT_s1/checkpoints/best.pt runs/m30kT_s2/checkpoints/best.pt \\
        --beams 1 5 --out runs/ensemble_eval

Options: --split the split to score (default test: test2016 for Multi30k); --beams the beam
sizes (1 = greedy; default 1 5); --out the folder of the eval results (default: each
checkpoint's RUN/eval); --device cpu|cuda|auto; --json FILE also write the figures there.

The evaluations are those of `attnseq eval A.pt` and `attnseq eval A.pt B.pt ...`
(attnseq/evaluation/checkpoint_eval.py and attnseq/models/ensemble.py): the checkpoints' own
decoding settings but the beam size, the first checkpoint's config for the ensemble.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint


def compare(
    checkpoints: list[Path],
    beams: list[int],
    split: str = "test",
    out: Path | None = None,
    device: str = "auto",
) -> list[dict[str, Any]]:
    """One row per model (each checkpoint, then the ensemble of all) and beam size: its name,
    beam, and the split's BLEU, chrF and loss."""
    models = [("alone", [path]) for path in checkpoints] + [("ensemble", checkpoints)]
    rows = []
    for kind, paths in models:
        for beam in beams:
            metrics = evaluate_checkpoint(
                paths[0],
                split,
                out_dir=out,
                overrides=[f"decoding.beam={beam}"],
                device_name=device,
                ensemble=paths[1:],
            )
            rows.append(
                {
                    "model": " + ".join(str(path) for path in paths),
                    "kind": kind,
                    "beam": beam,
                    "bleu": metrics[f"{split}/bleu"],
                    "chrf": metrics[f"{split}/chrf"],
                    "loss": metrics[f"{split}/loss"],
                    "result": str(metrics.result.folder),
                }
            )
    return rows


def table(rows: list[dict[str, Any]], split: str) -> str:
    """The rows as a Markdown table, one line per model and beam."""
    lines = [
        f"| model | decoding | {split} BLEU | chrF | loss |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        decoding = "greedy" if row["beam"] == 1 else f"beam {row['beam']}"
        lines.append(
            f"| {row['model']} | {decoding} | {row['bleu']:.2f} | {row['chrf']:.2f} "
            f"| {row['loss']:.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", type=Path, nargs="+", help="two or more checkpoints")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if len(args.checkpoints) < 2:
        parser.error("an ensemble needs at least two checkpoints")
    rows = compare(args.checkpoints, args.beams, args.split, args.out, args.device)
    print(table(rows, args.split))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
