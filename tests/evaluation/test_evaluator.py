"""The evaluator of a split (attnseq/evaluation/evaluator.py): the attention diagnostics of real
models over padded batches, key by key, and as the mean of each example's entropy."""

import math

import pytest
import torch
from helpers import tiny_config

from attnseq.alignment.diagnostics import example_entropies
from attnseq.decoding import DecodingConfig
from attnseq.evaluation.evaluator import Evaluator
from attnseq.models import Vocabularies, build_model


def evaluator_for(examples: list[tuple[list[int], list[int]]]) -> Evaluator:
    return Evaluator(
        examples,
        ["x"] * len(examples),
        tgt_tokenizer=None,  # type: ignore[arg-type]  (never decoded here)
        device=torch.device("cpu"),
        max_tokens=12,
        decoding=DecodingConfig(),
    )


@pytest.mark.parametrize(
    ("overrides", "keys"),
    [
        (("model.family=transformer",), 2 + 1 + 2),  # overall, 1 layer, 2 heads
        (("model.family=rnn",), 2),
        (("model.family=rnn", "model.attention.score=none"), 0),
    ],
)
def test_evaluator_diagnostics_of_real_models(overrides: tuple[str, ...], keys: int) -> None:
    torch.manual_seed(0)
    cfg = tiny_config(*overrides)
    model = build_model(cfg.model, Vocabularies(12, 12, 0, 2, 3)).eval()
    examples = [([4, 5, 6], [7, 8]), ([9, 4], [5]), ([6], []), ([], [4]), ([4, 4, 5, 6, 7], [8])]
    results = evaluator_for(examples).attention_diagnostics(model)
    assert len(results) == keys
    if keys:
        assert 0.0 < results["attention/last_source_mass"] < 1.0
        # at most ln of the longest source (5), more than 0 for untrained attention
        assert 0.0 < results["attention/entropy"] < math.log(5)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_example_entropies_agree_with_the_evaluators(family: str) -> None:
    torch.manual_seed(0)
    model = build_model(tiny_config(f"model.family={family}").model, Vocabularies(12, 12, 0, 2, 3))
    examples = [([4, 5, 6], [7, 8]), ([9, 4], [5]), ([6], []), ([4, 4, 5, 6, 7], [8])]
    sums = example_entropies(model.eval(), examples, batch_size=2)
    overall = evaluator_for(examples).attention_diagnostics(model)["attention/entropy"]
    assert sums[:, 0].sum() / sums[:, 1].sum() == pytest.approx(overall)
    assert sums[2].tolist() == [0.0, 0.0] and sums[:, 1].tolist() == [3, 2, 0, 2]
