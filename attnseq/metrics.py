"""Corpus metrics: BLEU and chrF through sacrebleu, exact match, and perplexity.

Hypotheses and references are detokenized text. sacrebleu's signature is returned with the
score so every reported BLEU says how it was computed (Post 2018, "A Call for Clarity in
Reporting BLEU Scores").
"""

import math
from collections.abc import Sequence

import sacrebleu


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """Corpus BLEU (sacrebleu defaults: 13a tokenization, exp smoothing) and its signature."""
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF (Popović 2015) through sacrebleu."""
    return sacrebleu.metrics.CHRF().corpus_score(list(hypotheses), [list(references)]).score


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Share of hypotheses identical to their reference (after stripping outer whitespace)."""
    if not references:
        return 0.0
    same = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return same / len(references)


def perplexity(loss_per_token: float) -> float:
    """exp(mean token negative log-likelihood), capped so a diverged run stays printable."""
    return math.exp(min(loss_per_token, 100.0))


def translation_metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """BLEU, chrF and exact match of a translation-style output (keys without a split prefix)."""
    bleu_score, _ = bleu(hypotheses, references)
    return {
        "bleu": bleu_score,
        "chrf": chrf(hypotheses, references),
        "exact_match": exact_match(hypotheses, references),
    }
