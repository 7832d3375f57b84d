"""The scorer (attnseq/evaluation/scoring.py): teacher-forced log-probabilities equal to the
model's own token log-probabilities, and the empty-line rules of its summary. The command
that streams it: tests/cli/test_score_command.py."""

import math
from pathlib import Path

import pytest
import torch

import attnseq
from attnseq.evaluation.scoring import PairScore, Scorer, summarize


@pytest.fixture(scope="module")
def scorer(rnn_checkpoint: Path) -> Scorer:
    return attnseq.load(rnn_checkpoint, "cpu").scorer


def test_scores_are_the_models_token_log_probabilities(scorer: Scorer) -> None:
    """Each total is sum_t log softmax(logits_t)[y_t] over the target and </s>, computed
    here from one unbatched forward pass; an empty target is </s> alone."""
    pairs = [("the 3rd of March 1998", "1998-03-03"), ("May 5, 2001", ""), ("2 Jan 1990", "1990")]
    scores = scorer.score(pairs, max_sentences=2)
    model, tokenizers = scorer.model, scorer.tokenizers
    for (src_text, tgt_text), pair_score in zip(pairs, scores, strict=True):
        src = torch.tensor([tokenizers.src.encode(src_text)])  # (1, S)
        tgt = tokenizers.tgt.encode(tgt_text)
        tgt_in = torch.tensor([[model.bos_id, *tgt]])  # (1, T)
        with torch.no_grad():
            logits = model(src, torch.tensor([src.size(1)]), tgt_in).logits[0]  # (T, V)
        expected = torch.log_softmax(logits.double(), -1)[torch.arange(len(tgt) + 1), [*tgt, 3]]
        assert pair_score.tokens == len(tgt) + 1
        assert pair_score.log_prob == pytest.approx(float(expected.sum()), abs=1e-4)
    assert scores[1].tokens == 1 and scores[1].log_prob < 0
    # another batching: the same scores up to float summation order
    rebatched = scorer.score(pairs, max_tokens=10**6)
    assert [s.tokens for s in rebatched] == [s.tokens for s in scores]
    assert [s.log_prob for s in rebatched] == pytest.approx([s.log_prob for s in scores], abs=1e-4)
    # a stream in chunks of one pair: the same scores, in order
    streamed = list(scorer.score_stream(iter(pairs), chunk=1))
    assert [s.log_prob for s in streamed] == pytest.approx([s.log_prob for s in scores], abs=1e-4)


def test_empty_source_is_left_unscored(scorer: Scorer, tmp_path: Path) -> None:
    scores = scorer.score([("", "1998-03-03"), ("", ""), ("May 5, 2001", "2001-05-05")])
    assert [score.tokens for score in scores] == [0, 0, 11]
    assert math.isnan(scores[0].log_prob) and math.isnan(scores[1].mean)
    summary = summarize(scores)
    assert (summary.pairs, summary.skipped_empty, summary.tokens) == (3, 2, 11)
    assert summary.nll == pytest.approx(-scores[2].log_prob / 11)
    assert PairScore(math.nan, 0).line() == "nan\tnan\t0"
