"""The weights' moving average (attnseq/training/ema.py) follows its formula and swaps in and out
of the model. Runs with it: tests/training/test_accumulation_ema.py."""

import pytest
import torch

from attnseq.training.ema import WeightEMA


def test_the_average_follows_its_formula_and_swaps_in_and_out() -> None:
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(0.0)
    ema = WeightEMA(model, decay=0.9)
    expected = torch.zeros(1, 2)
    for update, value in enumerate([1.0, 2.0, 3.0, 4.0], start=1):
        with torch.no_grad():
            model.weight.fill_(value)
        ema.update(model)
        d = min(0.9, (1 + update) / (10 + update))
        expected = d * expected + (1 - d) * value
    torch.testing.assert_close(ema.average["weight"], expected)
    with ema.swapped_in(model):
        torch.testing.assert_close(model.weight.detach(), expected)
    assert torch.all(model.weight == 4.0)  # the training weights are back
    with pytest.raises(ValueError):
        WeightEMA(model, decay=1.0)
