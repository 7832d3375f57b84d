"""Head importance (Michel et al. 2019): the gradient measure against finite differences, its
per-layer normalisation, and the ablation measure against eval's loss with the head masked."""

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_config

from attnseq.analysis.head_importance import (
    ablation_importance,
    gradient_importance,
    head_importance,
    normalize_per_layer,
)
from attnseq.data.batching import collate
from attnseq.data.prepare import prepare_data
from attnseq.evaluation.evaluator import make_evaluator
from attnseq.models import Vocabularies, build_model
from attnseq.models.head_mask import attention_sites
from attnseq.models.loading import load_trained_model

PAD, BOS, EOS, VOCAB = 0, 2, 3, 12


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


@pytest.mark.slow
def test_ablation_equals_the_eval_loss_with_the_head_masked(eight_head_checkpoint):
    trained = load_trained_model(eight_head_checkpoint)
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
