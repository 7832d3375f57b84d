"""Head importance (Michel et al. 2019) and `attnseq heads`: the gradient measure against finite
differences, the ablation measure against eval's loss with the head masked, the report files,
pruned checkpoints (round trip, eval, decoding) and the command's exit status 2 on mistakes."""

import itertools
import json
import os
import shutil

import pytest
import torch
import torch.nn.functional as F
from helpers import eval_result, tiny_config, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.analysis.head_importance import (
    ablation_importance,
    gradient_importance,
    head_importance,
    importance_figure,
    mean_loss,
    normalize_per_layer,
)
from attnseq.cli.app import app
from attnseq.cli.heads_runner import HeadsRequest, run_heads
from attnseq.data.batching import collate
from attnseq.data.prepare import prepare_data
from attnseq.evaluation.evaluator import make_evaluator
from attnseq.models import Vocabularies, build_model
from attnseq.models.head_mask import (
    attention_sites,
    get_head_masks,
    masked_heads,
    prune_masks,
    random_scores,
)
from attnseq.models.loading import load_trained_model

PAD, BOS, EOS, VOCAB = 0, 2, 3, 12
TRANSFORMER = ("model.family=transformer", "model.enc_layers=2", "model.dec_layers=1")


def tiny_batches(count: int = 2):
    """`count` batches of 3 random examples of lengths 2..5."""
    generator = torch.Generator().manual_seed(4)
    batches = []
    for index in range(count):
        examples = [
            (
                torch.randint(4, VOCAB, (2 + (index + row) % 4,), generator=generator).tolist(),
                torch.randint(4, VOCAB, (1 + (index * row) % 4,), generator=generator).tolist(),
            )
            for row in range(3)
        ]
        batches.append(collate(examples, [0, 1, 2], pad_id=PAD, bos_id=BOS, eos_id=EOS))
    return batches


def test_gradient_importance_equals_finite_differences():
    torch.manual_seed(0)
    cfg = tiny_config("model.family=transformer", "model.dropout=0.0", "model.d_model=8")
    model = build_model(cfg.model, Vocabularies(VOCAB, VOCAB, PAD, BOS, EOS)).double().eval()
    model.encoder.layers[0].self_attn.head_mask[1] = 0.0  # the gradient is taken where xi is
    batches = tiny_batches()
    scores = gradient_importance(model, batches)
    assert all(param.requires_grad for param in model.parameters())  # left as they were
    epsilon = 1e-5
    for site in attention_sites(model):
        mask = site.attention.head_mask
        for head in range(mask.numel()):
            slopes = []
            for batch in batches:
                kept = float(mask[head])
                mask[head] = kept + epsilon
                above = double_loss(model, batch)
                mask[head] = kept - epsilon
                below = double_loss(model, batch)
                mask[head] = kept
                slopes.append(abs(above - below) / (2 * epsilon))
            expected = sum(slopes) / len(slopes)  # E over batches of |dL_b / dxi_h|
            got = float(scores[site.kind][site.layer, head])
            assert got == pytest.approx(expected, rel=1e-4, abs=1e-7)
    assert float(scores["decoder_cross"].min()) > 0


def double_loss(model, batch) -> float:
    """Mean token NLL of one batch in float64 (sequence_loss works in float32, too coarse for
    finite differences)."""
    with torch.no_grad():
        logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T, V)
    return float(F.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD))


def test_normalize_per_layer_divides_by_each_rows_l2_norm():
    scores = {"encoder_self": torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)}
    assert normalize_per_layer(scores)["encoder_self"].tolist() == [[0.6, 0.8], [0.0, 0.0]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("heads") / "model.pt"
    return untrained_checkpoint(path, *TRANSFORMER, "data.valid_size=12", "data.test_size=6")


def test_ablation_equals_the_eval_loss_with_the_head_masked(checkpoint):
    trained = load_trained_model(checkpoint)
    cfg, model = trained.cfg, trained.model
    data = prepare_data(cfg.data, cfg.seed, tokenizers=trained.tokenizers, splits=["valid"])
    evaluator = make_evaluator(cfg, data, "valid", torch.device("cpu"))
    base = evaluator.loss(model)
    scores = ablation_importance(model, evaluator.loss, base)
    for site in attention_sites(model):
        for head in range(site.attention.heads):
            site.attention.head_mask[head] = 0.0
            masked = evaluator.loss(model)
            site.attention.head_mask[head] = 1.0
            assert float(scores[site.kind][site.layer, head]) == pytest.approx(masked - base)
    assert evaluator.loss(model) == base  # every mask restored
    # the same numbers from the batches `attnseq heads` reads
    importance = head_importance(model, evaluator.scored_batches(model), "valid")
    assert importance.base_loss == pytest.approx(base)
    for kind, values in importance.ablation.items():
        torch.testing.assert_close(values, scores[kind], atol=1e-6, rtol=0)


def test_report_and_pruned_checkpoint_round_trip(checkpoint, tmp_path):
    out = tmp_path / "pruned.pt"
    request = HeadsRequest(
        checkpoint,
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
    source = load_trained_model(checkpoint)
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


def test_random_pruning_is_seeded_and_gradient_pruning_takes_the_lowest(checkpoint, tmp_path):
    def pruned(by: str, seed: int = 0) -> list:
        request = HeadsRequest(
            checkpoint,
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


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--prune", "8"], "K must be below"),
        (["--prune", "1.5"], "fraction must be in (0, 1)"),
        (["--prune", "0.0"], "fraction must be in (0, 1)"),
        (["--split", "dev"], "is not a split of this dataset"),
        (["--prune", "2"], "--prune and --out go together"),
        (["--by", "size"], "--by must be one of"),
        (["--max-batches", "0"], "--max-batches must be at least 1"),
        # every split of a generated task is made: 2**31 training pairs would take hours
        (["data.train_size=2147483648"], "the generated data does not fit"),
    ],
)
def test_heads_command_exits_2_on_mistakes(checkpoint, tmp_path, arguments, message):
    if "--prune" in arguments and arguments[1] != "2":
        arguments = [*arguments, "--out", str(tmp_path / "x.pt")]
    result = CliRunner().invoke(app, ["heads", str(checkpoint), *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x.pt").exists()


def test_heads_command_needs_a_transformer(rnn_checkpoint):
    result = CliRunner().invoke(app, ["heads", str(rnn_checkpoint)])
    assert result.exit_code == 2
    assert "heads needs a transformer" in result.output


def test_heads_command_prints_tables_and_writes_files(checkpoint, tmp_path):
    options = ["--report-dir", str(tmp_path), "--prune", "1", "--out", str(tmp_path / "p.pt")]
    result = CliRunner().invoke(app, ["heads", str(checkpoint), *options])
    assert result.exit_code == 0, result.output
    assert "encoder self-attention" in result.output and "decoder cross-attention" in result.output
    assert (tmp_path / "model.valid.json").exists() and (tmp_path / "model.valid.png").exists()
    assert "pruned 1 heads" in result.output


def test_a_checkpoint_name_that_is_not_utf8_titles_the_figure(checkpoint, tmp_path):
    """A name's bytes that are not UTF-8 (lone surrogates in Python) made matplotlib refuse the
    figure's title with a TypeError; the title shows them as U+FFFD."""
    latin1 = os.fsdecode(bytes(tmp_path) + b"/caf\xe9.pt")
    shutil.copyfile(checkpoint, latin1)
    result = CliRunner().invoke(app, ["heads", latin1, "--report-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert os.path.isfile(os.fsdecode(bytes(tmp_path) + b"/r/caf\xe9.valid.png"))


def test_tables_figure_message_and_record_count_layers_and_heads_from_1(checkpoint, tmp_path):
    out = tmp_path / "pruned.pt"
    pruning = ["--prune", "4", "--by", "ablation", "--out", str(out)]
    report = ["--report-dir", str(tmp_path / "report"), "--device", "cpu"]
    result = CliRunner().invoke(app, ["heads", str(checkpoint), *pruning, *report])
    assert result.exit_code == 0, result.output
    assert "head 1" in result.output and "head 2" in result.output
    assert "head 0" not in result.output
    message = next(line for line in result.output.splitlines() if line.startswith("pruned 4"))
    assert "L0" not in message and "h0" not in message and "encoder_self L2 h" in message
    layers = [
        line.split("│")[1].strip()
        for line in result.output.splitlines()
        if "/" in line and line.count("│") > 2
    ]
    assert "0" not in layers and {"1", "2"} <= set(layers)
    heads = load_trained_model(out).payload["head_pruning"]["heads"]
    assert min(min(layer, head) for _, layer, head in heads) == 1
    assert {layer for kind, layer, _ in heads if kind == "encoder_self"} == {1, 2}

    report = json.loads(next((tmp_path / "report").glob("*.json")).read_text())
    assert "p + 1" in report["numbering"]
    measured = run_heads(HeadsRequest(checkpoint, report_dir=tmp_path / "again", device="cpu"))
    axis = importance_figure(measured.importance, "t").axes[0]  # encoder: 2 layers x 2 heads
    assert [label.get_text() for label in axis.get_xticklabels()] == ["1", "2"]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["1", "2"]
