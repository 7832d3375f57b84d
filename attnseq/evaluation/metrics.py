"""Corpus metrics: BLEU and chrF through sacreBLEU, with its signature (Post 2018), ROUGE-1/2/L
F1 x100 through rouge-score (Lin 2004; Porter stemmer, English tokens), exact match,
repetition and perplexity; `task_metrics` picks the set a task reports."""

import functools
import math
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

import sacrebleu

if TYPE_CHECKING:
    from rouge_score.rouge_scorer import RougeScorer

ROUGE_KEYS = {"rouge1": "rouge1", "rouge2": "rouge2", "rougeL": "rouge_l"}  # package -> ours


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """Corpus BLEU (sacrebleu defaults: 13a tokenization, exp smoothing) and its signature."""
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())


def bleu_signature() -> str:
    """sacreBLEU's signature of the BLEU every attnseq score uses (one reference, mixed case,
    13a tokenization, exp smoothing, the installed sacrebleu version): the string to report
    beside a BLEU, so that others can tell whether their number is comparable."""
    return sacrebleu_signature("bleu")


SACREBLEU_METRICS = {"bleu": "BLEU", "chrf": "CHRF", "ter": "TER"}  # ours -> sacrebleu's class


def sacrebleu_metric(name: str) -> Any:
    """A fresh sacreBLEU metric object of `name` (bleu, chrf or ter) with attnseq's settings:
    sacreBLEU's defaults."""
    return getattr(sacrebleu.metrics, SACREBLEU_METRICS[name])()


def sacrebleu_signature(name: str) -> str:
    """sacreBLEU's signature of the metric `name` with attnseq's settings and one reference
    stream: the string to report beside its score."""
    metric = sacrebleu_metric(name)
    metric.num_refs = 1  # what scoring with one reference stream sets (get_signature needs it)
    return str(metric.get_signature())


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


@functools.cache
def _rouge_scorer() -> "RougeScorer":
    # Building the scorer loads the stemmer; one instance serves every call. rouge-score
    # imports nltk, scipy and scikit-learn (about 2 s), which only summarization needs: the
    # import waits for the first ROUGE score.
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_KEYS), use_stemmer=True)


def rouge(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1/2/L F1 averaged over examples, x100: keys rouge1, rouge2, rouge_l (0 if empty)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    totals = dict.fromkeys(ROUGE_KEYS.values(), 0.0)
    scorer = _rouge_scorer()
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        # score(target, prediction): the reference comes first.
        scores = scorer.score(reference, hypothesis)
        for key, name in ROUGE_KEYS.items():
            totals[name] += scores[key].fmeasure
    count = max(len(references), 1)
    return {name: 100.0 * total / count for name, total in totals.items()}


def repeated_trigrams(hypotheses: Sequence[str]) -> float:
    """Share (x100) of the outputs' word trigrams that repeat an earlier one of the same output,
    pooled over the outputs (See et al. 2017, section 7.2, figure 4):

        100 * sum_y (#trigrams(y) - #distinct trigrams(y)) / sum_y #trigrams(y)

    with words as ROUGE sees them (rouge-score's tokenizer); 0 without any trigram."""
    from rouge_score import tokenize  # on first use, as in _rouge_scorer

    total = repeated = 0
    for hypothesis in hypotheses:
        words = tokenize.tokenize(hypothesis, None)  # rouge-score's words, no stemming
        trigrams = list(zip(words, words[1:], words[2:], strict=False))
        total += len(trigrams)
        repeated += len(trigrams) - len(set(trigrams))
    return 100.0 * repeated / total if total else 0.0


def summarization_metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1/2/L, exact match and the share of repeated trigrams of a summarization output
    (keys without a split prefix)."""
    metrics = rouge(hypotheses, references)
    metrics["exact_match"] = exact_match(hypotheses, references)
    metrics["repeated_trigrams"] = repeated_trigrams(hypotheses)
    return metrics


def task_metrics(
    task: str | Enum, hypotheses: Sequence[str], references: Sequence[str]
) -> dict[str, float]:
    """The metrics of a task: "translation" -> bleu, chrf, exact_match; "summarization" ->
    rouge1, rouge2, rouge_l, exact_match, repeated_trigrams. `task` may also be a `TaskType`."""
    name = task.value if isinstance(task, Enum) else task
    if name == "translation":
        return translation_metrics(hypotheses, references)
    if name == "summarization":
        return summarization_metrics(hypotheses, references)
    raise ValueError(f"unknown task {name!r}; valid: translation, summarization")
