"""The config's choices (attnseq/config/choices.py): which way a metric improves, by its name, and
the value no model can improve on. That the attention kinds and scores are the mechanisms'
names: tests/attention/test_efficient.py and tests/attention/test_scores.py."""

import pytest

from attnseq.config.choices import Metric, higher_is_better


@pytest.mark.parametrize(
    ("name", "higher"),
    [("loss", False), ("test/ppl", False), ("valid/AER", False), ("test/bleu", True)],
)
def test_loss_perplexity_and_aer_are_minimised_and_the_rest_maximised(
    name: str, higher: bool
) -> None:
    assert higher_is_better(name) is higher


def test_every_metric_has_its_ceiling_in_its_own_unit() -> None:
    assert Metric.exact_match.best_possible == 1.0 and Metric.exact_match.higher_is_better
    assert Metric.loss.best_possible == 0.0 and not Metric.loss.higher_is_better
    assert Metric.ppl.best_possible == 1.0 and not Metric.ppl.higher_is_better
    percentages = set(Metric) - {Metric.exact_match, Metric.loss, Metric.ppl}
    assert all(metric.best_possible == 100.0 for metric in percentages)
