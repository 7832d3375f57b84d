"""Greedy decoding (attnseq/decoding/greedy.py) against the argmax of every step written out with
full teacher-forced passes, for each model family."""

import math

import pytest
import torch
from helpers import BOS, EOS, FAMILIES, PAD, make_model, random_batch
from torch import Tensor

from attnseq.decoding import greedy_decode, max_output_lengths
from attnseq.models.seq2seq import Seq2Seq


def reference_greedy(model: Seq2Seq, src: Tensor, length: int, limit: int) -> tuple[list, float]:
    """Greedy decoding written out with full teacher-forced passes over the growing prefix
    (no decoder state, no batching): the argmax of every step, PAD and BOS excluded."""
    tokens: list[int] = []
    score = 0.0
    while True:
        tgt_in = torch.tensor([[BOS, *tokens]])  # (1, t + 1)
        logits = model(src[:length].unsqueeze(0), torch.tensor([length]), tgt_in).logits
        log_probs = torch.log_softmax(logits[0, -1].float(), dim=-1)  # (V,)
        log_probs[[PAD, BOS]] = -math.inf
        best = int(log_probs.argmax())
        score += float(log_probs[best])
        if best == EOS:
            return tokens, score
        tokens.append(best)
        if len(tokens) == limit:
            return tokens, score


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_is_the_argmax_of_every_step(family: str) -> None:
    model = make_model(family, seed=2)
    src, lengths = random_batch(6, seed=8)
    limits = max_output_lengths(lengths, 1.0, 1)
    with torch.no_grad():
        found = greedy_decode(model, src, lengths, limits)
        for row, hypothesis in enumerate(found):
            tokens, score = reference_greedy(model, src[row], int(lengths[row]), int(limits[row]))
            assert hypothesis.tokens == tokens, row
            assert hypothesis.score == pytest.approx(score, abs=1e-4)
