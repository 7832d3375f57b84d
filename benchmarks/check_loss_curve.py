"""Fixed-seed check that the fast training path learns what the plain one learns.

The fast path is what `attnseq train` runs: one teacher-forced `model(src, src_lengths, tgt_in)`
call, with the fused attention kernel (scaled_dot_product_attention), the whole target through
the transformer decoder or the RNN at once, attention keys projected once per batch. The
reference path computes the same function the way a decoder is usually first written: the
source encoded once (`start_decoding`), then one `decode_step` per target position on the
gold previous token, with attention weights asked for (the explicit softmax path; the
transformer's key/value cache, the RNN cell one step at a time).

Three runs share the seed, so they share the initial weights and the batches, in order:

- fast: the fast path;
- reference: the reference path;
- fast, other dropout: the fast path with the dropout masks drawn from another seed. Two
  paths cannot draw identical masks (their dropout calls differ in shape and order), so this
  run measures the noise that the comparison has to be judged against.

Each run validates (teacher-forced loss per target token on the valid split) every --every
updates. The script prints the three curves and the largest |fast - reference| beside the
largest |fast - fast, other dropout|, and writes them to --out as JSON. With model.dropout=0
there is no mask noise, and the two paths should agree to floating-point rounding.

Usage (from the repository root):

    .venv/bin/python benchmarks/check_loss_curve.py --steps 300 --every 50 -- \\
        model=transformer data=dates
    ATTNSEQ_DATA=../shared/data .venv/bin/python benchmarks/check_loss_curve.py \\
        --steps 200 --every 50 --out loss_curve.json -- config=multi30k_rnn_bahdanau

Pointer-generator models (model.copy=true) are not supported: their coverage loss needs the
teacher-forced pass (`Seq2SeqOutput.coverage_loss`).
"""

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmark.py, next to this file

from benchmark import build_trainer, compose, training_batches  # noqa: E402

from attnseq.errors import UserError  # noqa: E402
from attnseq.models.seq2seq import Seq2Seq, Seq2SeqOutput  # noqa: E402


class StepwiseTeacherForcing(nn.Module):
    """The reference path: `model`'s teacher-forced logits, one target position at a time."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Seq2SeqOutput:
        """src (B, S), src_lengths (B,), tgt_in (B, T) -> logits (B, T, V)."""
        state = self.model.start_decoding(src, src_lengths)
        logits = []
        for position in range(tgt_in.size(1)):
            step_logits, _, state = self.model.decode_step(
                tgt_in[:, position], state, need_weights=True
            )
            logits.append(step_logits)
        return Seq2SeqOutput(logits=torch.stack(logits, dim=1))


def loss_curve(cfg, steps: int, every: int, path: str, dropout_seed: int | None) -> list[dict]:
    """Validation loss every `every` updates of one run; `path` is "fast" or "reference"."""
    trainer, _, _ = build_trainer(cfg, torch.device("cpu"), validate=True, max_steps=steps)
    model, valid = trainer.model, trainer.evaluator
    if path == "reference":
        trainer.parts.module = StepwiseTeacherForcing(model)
    if dropout_seed is not None:  # after the weights are drawn: only the dropout masks change
        torch.manual_seed(dropout_seed)

    stream = training_batches(trainer)
    curve = [{"step": 0, "valid_loss": valid.loss(model)}]
    for step in range(1, steps + 1):
        batch, counts = next(stream)
        trainer.state.step = step - 1
        trainer.update([(batch, counts)])
        if step % every == 0 or step == steps:
            curve.append({"step": step, "valid_loss": valid.loss(model)})
            print(
                f"  {path} step {step}: valid loss {curve[-1]['valid_loss']:.4f}", file=sys.stderr
            )
    return curve


def largest_gap(a: list[dict], b: list[dict]) -> float:
    return max(abs(x["valid_loss"] - y["valid_loss"]) for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", help="attnseq train overrides (after --)")
    parser.add_argument("--steps", type=int, default=300, help="updates per run")
    parser.add_argument("--every", type=int, default=50, help="validate every N updates")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--out", type=Path, help="write the curves here as JSON")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        parser.error("--steps and --every must be >= 1")
    try:
        cfg = compose(list(args.overrides), args.threads)
        if cfg.model.copy:
            raise UserError("model.copy=true: the reference path has no coverage loss")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)

    runs = {
        "fast": loss_curve(cfg, args.steps, args.every, "fast", None),
        "reference": loss_curve(cfg, args.steps, args.every, "reference", None),
        "fast_other_dropout": loss_curve(cfg, args.steps, args.every, "fast", cfg.seed + 1000),
    }
    report: dict[str, Any] = {
        "overrides": list(args.overrides),
        "steps": args.steps,
        "curves": runs,
        "max_gap_fast_vs_reference": largest_gap(runs["fast"], runs["reference"]),
        "max_gap_fast_vs_other_dropout": largest_gap(runs["fast"], runs["fast_other_dropout"]),
    }
    print("| step | fast | reference | fast, other dropout |")
    print("|---|---|---|---|")
    for fast, reference, other in zip(*runs.values(), strict=True):
        print(
            f"| {fast['step']} | {fast['valid_loss']:.4f} | {reference['valid_loss']:.4f} | "
            f"{other['valid_loss']:.4f} |"
        )
    print(
        f"largest |fast - reference| = {report['max_gap_fast_vs_reference']:.4f}; "
        f"largest |fast - fast, other dropout| = {report['max_gap_fast_vs_other_dropout']:.4f}"
    )
    if args.out:
        from attnseq.io.atomic import atomic_write_json

        atomic_write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
