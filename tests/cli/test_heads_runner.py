"""What `attnseq heads` runs (attnseq/cli/heads_runner.py): the report files, pruned checkpoints
(round trip, eval), random pruning seeded and gradient pruning of the lowest heads."""

import itertools
import json

import pytest
import torch
from helpers import eval_result
from typer.testing import CliRunner

from attnseq.analysis.head_importance import mean_loss
from attnseq.cli.app import app
from attnseq.cli.heads_runner import HeadsRequest, run_heads
from attnseq.data.prepare import prepare_data
from attnseq.evaluation.evaluator import make_evaluator
from attnseq.models.head_mask import (
    get_head_masks,
    masked_heads,
    prune_masks,
    random_scores,
)
from attnseq.models.loading import load_trained_model


@pytest.mark.slow
def test_report_and_pruned_checkpoint_round_trip(eight_head_checkpoint, tmp_path):
    out = tmp_path / "pruned.pt"
    request = HeadsRequest(
        eight_head_checkpoint,
        report_dir=tmp_path / "report",
        prune="0.5",
        by="ablation",
        out=out,
        device="cpu",
    )
    result = run_heads(request)
    report = json.loads(result.json_path.read_text())
    assert report["split"] == "valid" and report["batches"] >= 1
    assert len(report["ablation"]["encoder_self"]) == 2  # layers
    assert len(report["gradient_normalized"]["decoder_cross"][0]) == 2  # heads
    assert result.figure_path.read_bytes()[:4] == b"\x89PNG"
    # 8 heads (2 + 1 + 1 layers x 2): half of them, the lowest loss increases, one per sublayer
    assert len(result.pruned) == 4
    assert {(kind, layer) for kind, layer, _ in result.pruned} == {
        ("encoder_self", 0),
        ("encoder_self", 1),
        ("decoder_self", 0),
        ("decoder_cross", 0),
    }
    for kind, layer, head in result.pruned:
        other = 1 - head
        assert report["ablation"][kind][layer][head] <= report["ablation"][kind][layer][other]
    pruned = load_trained_model(out)
    assert masked_heads(pruned.model) == result.pruned
    assert pruned.payload["head_pruning"]["by"] == "ablation"
    source = load_trained_model(eight_head_checkpoint)
    kept = {n: v for n, v in pruned.payload["model"].items() if not n.endswith("head_mask")}
    assert all(torch.equal(v, source.payload["model"][n]) for n, v in kept.items())

    # eval of the pruned checkpoint: as usual, its record names the pruned heads, and its loss
    # is the one the masks give
    runner = CliRunner()
    result_eval = runner.invoke(
        app,
        ["eval", str(out), "--split", "valid", "--out", str(tmp_path / "eval"), "--device", "cpu"],
    )
    assert result_eval.exit_code == 0, result_eval.output
    assert "pruned heads" in result_eval.output and "4 of 8" in result_eval.output
    metrics = json.loads((eval_result(tmp_path / "eval") / "metrics.json").read_text())
    expected_loss = head_importance_loss(pruned)
    assert metrics["valid/loss"] == pytest.approx(expected_loss, rel=1e-5)


def head_importance_loss(trained) -> float:
    cfg = trained.cfg
    data = prepare_data(cfg.data, cfg.seed, tokenizers=trained.tokenizers, splits=["valid"])
    evaluator = make_evaluator(cfg, data, "valid", torch.device("cpu"))
    return mean_loss(trained.model, evaluator.scored_batches(trained.model))[0]


def zeros(masks: dict) -> list[tuple[str, int, int]]:
    """(kind, layer, head) where the masks are 0."""
    return [
        (kind, layer, head)
        for kind, mask in masks.items()
        for layer, head in (mask == 0).nonzero().tolist()
    ]


@pytest.mark.slow
def test_random_pruning_is_seeded_and_gradient_pruning_takes_the_lowest(
    eight_head_checkpoint, tmp_path
):
    def pruned(by: str, seed: int = 0) -> list:
        request = HeadsRequest(
            eight_head_checkpoint,
            report_dir=tmp_path,
            prune="2",
            by=by,
            seed=seed,
            out=tmp_path / f"{by}{seed}.pt",
            max_batches=1,
        )
        return run_heads(request)

    random = pruned("random", 1)
    expected = prune_masks(random_scores(random.importance.masks, 1), 2, random.importance.masks)
    assert random.pruned == zeros(expected)
    result = pruned("gradient")
    scores = result.importance.gradient_normalized
    flat = sorted(
        (float(values[layer, head]), kind, layer, head)
        for kind, values in scores.items()
        for layer, head in itertools.product(range(values.size(0)), range(values.size(1)))
    )
    lowest = [(kind, layer, head) for _, kind, layer, head in flat[:2]]
    assert sorted(result.pruned) == sorted(lowest)
    assert result.importance.batches == 1
    masks = get_head_masks(load_trained_model(tmp_path / "gradient0.pt").model)
    assert int((torch.cat([m.flatten() for m in masks.values()]) == 0).sum()) == 2
