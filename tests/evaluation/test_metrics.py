"""Metrics: BLEU/chrF equal sacrebleu's, ROUGE equals rouge-score's, task_metrics picks the set."""

import pytest
import sacrebleu

from attnseq.config.choices import TaskType
from attnseq.evaluation.metrics import (
    bleu,
    bleu_signature,
    chrf,
    exact_match,
    perplexity,
    rouge,
    task_metrics,
    translation_metrics,
)

HYPOTHESES = [
    "A man in an orange hat is staring at something.",
    "Two dogs run across the grass.",
    "the cats were sitting on the mats",
]
REFERENCES = [
    "A man in an orange hat starring at something.",
    "Two dogs are running through a field.",
    "The cat sat on the mat.",
]


def test_bleu_and_chrf_match_sacrebleu() -> None:
    score, signature = bleu(HYPOTHESES, REFERENCES)
    assert score == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert "tok:13a" in signature
    assert bleu_signature() == signature  # what eval and train print beside a BLEU
    assert chrf(HYPOTHESES, REFERENCES) == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score
    )


def test_rouge_matches_rouge_score() -> None:
    from rouge_score import rouge_scorer  # its import (nltk) takes seconds: only where needed

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    direct = [scorer.score(ref, hyp) for hyp, ref in zip(HYPOTHESES, REFERENCES, strict=True)]
    ours = rouge(HYPOTHESES, REFERENCES)
    for key, name in (("rouge1", "rouge1"), ("rouge2", "rouge2"), ("rougeL", "rouge_l")):
        expected = 100 * sum(s[key].fmeasure for s in direct) / len(direct)
        assert ours[name] == pytest.approx(expected)
    # Stemming is on: "cats" matches "cat".
    assert rouge(["the cats"], ["the cat"])["rouge1"] == pytest.approx(100.0)


def test_rouge_golden_values() -> None:
    # hyp "the cat sat", ref "the cat sat down": P = 3/3, R = 3/4, F1 = 6/7;
    # bigrams: 2 of 2 vs 2 of 3, F1 = 4/5; LCS = 3 tokens, F1 = 6/7.
    scores = rouge(["the cat sat"], ["the cat sat down"])
    assert scores["rouge1"] == pytest.approx(600 / 7)
    assert scores["rouge2"] == pytest.approx(80.0)
    assert scores["rouge_l"] == pytest.approx(600 / 7)
    assert rouge([], []) == {"rouge1": 0.0, "rouge2": 0.0, "rouge_l": 0.0}
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        rouge(["a", "b"], ["a"])


def test_task_metrics_pick_the_set() -> None:
    translation = task_metrics("translation", HYPOTHESES, REFERENCES)
    assert translation == translation_metrics(HYPOTHESES, REFERENCES)
    assert set(translation) == {"bleu", "chrf", "exact_match"}
    summary = task_metrics(TaskType.summarization, HYPOTHESES, REFERENCES)
    assert set(summary) == {"rouge1", "rouge2", "rouge_l", "exact_match", "repeated_trigrams"}
    assert summary["rouge_l"] == pytest.approx(rouge(HYPOTHESES, REFERENCES)["rouge_l"])
    assert task_metrics("summarization", ["x "], ["x"])["exact_match"] == 1.0
    with pytest.raises(ValueError, match="unknown task 'qa'"):
        task_metrics("qa", HYPOTHESES, REFERENCES)


def test_existing_metrics_unchanged() -> None:
    assert exact_match(["a ", "b"], ["a", "c"]) == 0.5
    assert exact_match([], []) == 0.0
    assert perplexity(0.0) == 1.0
    assert perplexity(1e9) == pytest.approx(perplexity(100.0))


def test_repeated_trigrams_on_hand_numbers() -> None:
    from attnseq.evaluation.metrics import repeated_trigrams

    # "a b c a b c a": trigrams abc bca cab abc bca -> 2 of 5 repeat; "x y": none at all;
    # "It is. it is it": words it is it is it -> trigrams (it is it) (is it is) (it is it)
    outputs = ["a b c a b c a", "x y", "It is. it is it"]
    assert repeated_trigrams(outputs) == pytest.approx(100 * (2 + 1) / (5 + 3))
    assert repeated_trigrams(["one two three four"]) == 0.0
    assert repeated_trigrams([]) == 0.0
