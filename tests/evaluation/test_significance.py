"""Paired bootstrap and approximate randomization: a system better on every sentence is
significant, a copy of the baseline is not (p = 1), the draws are seeded, and sacreBLEU's own
paired-test example (WMT17 en-de) gives its published p-values."""

import lzma
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from attnseq.errors import UserError
from attnseq.evaluation import metrics as corpus_metrics
from attnseq.evaluation.significance import (
    TASK_TESTED_METRICS,
    Resampling,
    metric_scores,
    randomization_p,
    sacrebleu_paired,
    sentence_scores,
)

DATA = Path(__file__).parent / "data"

REFERENCES = [
    f"the {animal} saw {count} birds near the {place} today"
    for animal in ("cat", "dog", "fox", "owl", "hen")
    for count in ("two", "five", "nine", "ten")
    for place in ("river", "house")
]  # 40 distinct sentences


def worse(reference: str) -> str:
    """The reference with its last three words dropped and one word changed: worse on every
    metric, sentence by sentence."""
    words = reference.split()
    return " ".join(["a", *words[1:-3]])


@pytest.mark.parametrize("task", ["translation", "summarization"])
def test_a_system_better_on_every_sentence_is_significant(task: str) -> None:
    systems = {"A": [worse(r) for r in REFERENCES], "B": list(REFERENCES)}
    results = metric_scores(systems, REFERENCES, TASK_TESTED_METRICS[task], Resampling(trials=2000))
    for metric, result in results["B"].items():
        assert result.p_bootstrap is not None and result.p_bootstrap < 0.01, metric
        assert result.p_randomization is not None and result.p_randomization < 0.01, metric
        baseline = results["A"][metric]
        assert baseline.p_bootstrap is None and baseline.p_randomization is None
    assert results["B"]["exact_match"].score == 1.0 and results["A"]["exact_match"].score == 0.0


@pytest.mark.parametrize("task", ["translation", "summarization"])
def test_identical_systems_have_p_one(task: str) -> None:
    outputs = [worse(r) if i % 3 else r for i, r in enumerate(REFERENCES)]
    systems = {"A": outputs, "B": list(outputs)}
    results = metric_scores(systems, REFERENCES, TASK_TESTED_METRICS[task], Resampling(trials=500))
    for metric, result in results["B"].items():
        assert result.p_bootstrap == 1.0 and result.p_randomization == 1.0, metric
        assert result.score == results["A"][metric].score


def test_the_draws_are_seeded() -> None:
    systems = {
        "A": [worse(r) if i % 2 else r for i, r in enumerate(REFERENCES)],
        "B": [worse(r) if i % 3 else r for i, r in enumerate(REFERENCES)],
    }
    metrics = ["bleu", "rouge_l", "exact_match"]
    first = metric_scores(systems, REFERENCES, metrics, Resampling(seed=7, trials=300))
    again = metric_scores(systems, REFERENCES, metrics, Resampling(seed=7, trials=300))
    other = metric_scores(systems, REFERENCES, metrics, Resampling(seed=8, trials=300))
    assert first == again
    for metric in metrics:
        assert first["B"][metric].score == other["B"][metric].score  # no draw in the score
        assert first["B"][metric].mean != other["B"][metric].mean


def test_scores_are_the_metrics_of_metrics_py() -> None:
    hypotheses = [worse(r) if i % 3 else r for i, r in enumerate(REFERENCES)]
    metrics = ["bleu", "chrf", "rouge1", "rouge2", "rouge_l", "exact_match"]
    systems = {"A": REFERENCES, "B": hypotheses}
    results = metric_scores(systems, REFERENCES, metrics, Resampling(trials=10))
    scores = {metric: value.score for metric, value in results["B"].items()}
    assert scores["bleu"] == pytest.approx(corpus_metrics.bleu(hypotheses, REFERENCES)[0])
    assert scores["chrf"] == pytest.approx(corpus_metrics.chrf(hypotheses, REFERENCES))
    rouge = corpus_metrics.rouge(hypotheses, REFERENCES)
    for key in ("rouge1", "rouge2", "rouge_l"):
        assert scores[key] == pytest.approx(rouge[key])
    assert scores["exact_match"] == pytest.approx(14 / 40)  # i % 3 == 0 for 14 of 40
    assert sentence_scores("exact_match", ["a ", "b"], ["a", "c"]).tolist() == [1.0, 0.0]


def test_randomization_matches_the_exact_permutation_probability() -> None:
    # Two sentences, each 1 better in B: of the four swaps, two give |difference| 1 (none or
    # both swapped) and two give 0, so p -> 1/2 as the trials grow.
    rng = np.random.default_rng(0)
    p = randomization_p(np.array([0.0, 0.0]), np.array([1.0, 1.0]), 20000, rng)
    assert p == pytest.approx(0.5, abs=0.01)


def test_a_single_system_gets_its_intervals_alone() -> None:
    results = metric_scores({"A": REFERENCES}, REFERENCES, ["bleu", "exact_match"])
    for value in results["A"].values():
        assert value.p_bootstrap is None and value.p_randomization is None
        assert value.ci == 0.0  # the references themselves: every resample scores the same


def test_bad_arguments() -> None:
    with pytest.raises(UserError, match="seed must be >= 1, got 0"):
        Resampling(seed=0)
    with pytest.raises(UserError, match="trials must be >= 1, got -1"):
        Resampling(trials=-1)
    with pytest.raises(TypeError, match="resamples must be an int"):
        Resampling(resamples=1.5)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="B: 1 outputs but 2 references"):
        metric_scores({"A": ["x", "y"], "B": ["x"]}, ["x", "y"], ["bleu"])
    with pytest.raises(UserError, match="unknown metric 'meteor'"):
        metric_scores({"A": ["x"], "B": ["y"]}, ["x"], ["meteor"])


def read(name: str) -> list[str]:
    with lzma.open(DATA / f"wmt17_en_de.{name}.txt.xz", "rt", encoding="utf-8") as handle:
        return handle.read().split("\n")[:-1]


@pytest.mark.slow  # 12,000 resamples of 3,004 lines; the exact-permutation test runs by default
def test_sacrebleus_own_example_gives_its_p_values() -> None:
    """sacreBLEU's test/test_significance.py (github.com/mjpost/sacrebleu): WMT17 en-de
    systems against the first, LIUM-NMT, with BLEU(tokenize="none"), seed 12345; 2,000
    bootstrap resamples against Moses' p-values and 10,000 AR trials against multeval's, each
    within 0.01. tests/evaluation/data/ holds three of its systems and the reference, taken
    from its wmt17_en_de_systems.pkl.bz2."""
    references = read("reference")
    systems = {name: read(name) for name in ("LIUM-NMT", "FBK", "LMU-nmt-single")}
    assert {len(lines) for lines in systems.values()} == {len(references)} == {3004}
    metric = BLEU(references=[references], tokenize="none")
    results = sacrebleu_paired(systems, None, {"bleu": metric}, Resampling(12345, 2000, 10000))
    moses = {"FBK": 0.01267, "LMU-nmt-single": 0.20783}
    multeval = {"FBK": 0.0218, "LMU-nmt-single": 0.58494}
    for name in moses:
        result = results[name]["bleu"]
        assert result.p_bootstrap == pytest.approx(moses[name], abs=1e-2)
        assert result.p_randomization == pytest.approx(multeval[name], abs=1e-2)
    assert results["LIUM-NMT"]["bleu"].score == pytest.approx(21.6098, abs=1e-4)


def test_each_systems_statistics_are_extracted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both tests, and the baseline of each, share one extraction per system and metric; the
    metric objects are as they were afterwards, and the scores are sacreBLEU's."""
    from sacrebleu.metrics import TER

    calls: list[int] = []
    extract = TER._extract_corpus_statistics

    def counted(self, hypotheses, references):  # type: ignore[no-untyped-def]
        calls.append(len(hypotheses))
        return extract(self, hypotheses, references)

    monkeypatch.setattr(TER, "_extract_corpus_statistics", counted)
    systems = {"a": [worse(line) for line in REFERENCES], "b": list(REFERENCES)}
    metric = TER()
    results = sacrebleu_paired(systems, REFERENCES, {"ter": metric}, Resampling(3, 50, 50))
    assert calls == [len(REFERENCES)] * 2  # a and b, once each
    assert "_extract_corpus_statistics" not in vars(metric)
    assert results["b"]["ter"].score == 0.0
    assert results["a"]["ter"].score == pytest.approx(
        TER().corpus_score(systems["a"], [REFERENCES]).score
    )
