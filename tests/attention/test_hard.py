"""Hard attention's selection (attnseq/attention/hard.py): the straight-through Gumbel sample, the
REINFORCE sample's log-probability, a bandit that REINFORCE teaches its best arm, and the
selector's temperature, which is no weight."""

import torch

from attnseq.attention.hard import HardSelector, reinforce_sample, straight_through_gumbel
from attnseq.models.objective import reinforce_term, update_baseline


def test_gumbel_forward_one_hot_backward_nonzero() -> None:
    torch.manual_seed(0)
    scores = torch.randn(2, 4, 6, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6], dtype=torch.bool)[:, None]
    weights = straight_through_gumbel(scores, mask, 0.5).weights
    assert torch.equal(weights.detach().sum(-1), torch.ones(2, 4))
    assert set(weights.detach().unique().tolist()) <= {0.0, 1.0}
    assert weights.detach()[0, :, 4:].abs().sum() == 0  # masked never chosen
    (weights * torch.randn(2, 4, 6)).sum().backward()
    assert scores.grad is not None and scores.grad.abs().sum() > 0
    assert scores.grad[0, :, 4:].abs().sum() == 0


def test_reinforce_top_k_log_prob_is_plackett_luce() -> None:
    torch.manual_seed(1)
    scores = torch.randn(1, 1, 4)
    sample = reinforce_sample(scores, None, 2)
    alpha = scores.softmax(-1)[0, 0]
    first, second = sample.weights[0, 0].nonzero().flatten().tolist()
    # the order is unknown from the weights: the log-probability is one of the two orders
    orders = [(first, second), (second, first)]
    expected = [float(torch.log(alpha[a] * alpha[b] / (1 - alpha[a]))) for a, b in orders]
    assert min(abs(float(sample.log_prob) - e) for e in expected) < 1e-5


def test_reinforce_bandit_goes_to_best_arm() -> None:
    torch.manual_seed(0)
    logits = torch.zeros(1, 5, requires_grad=True)
    rewards_of = torch.tensor([0.1, 0.2, 1.0, 0.3, 0.0])
    optimizer = torch.optim.SGD([logits], lr=0.5)
    baseline = torch.tensor(float("nan"))
    for _ in range(300):
        sample = reinforce_sample(logits.expand(32, 5), None, 1)
        arm = sample.weights.argmax(-1)  # (32,)
        rewards = rewards_of[arm] + 0.1 * torch.randn(32)
        real = torch.ones(32, 1, dtype=torch.bool)
        term = reinforce_term(
            sample.log_prob[:, None], sample.entropy[:, None], rewards, baseline, real, (1.0, 0.0)
        )
        optimizer.zero_grad()
        (term / 32).backward()
        optimizer.step()
        update_baseline(baseline, rewards, 0.9)
    assert int(logits.argmax()) == 2
    assert float(logits.detach().softmax(-1)[0, 2]) > 0.9


def test_selector_temperature_not_in_state_dict() -> None:
    assert "temperature" not in HardSelector("gumbel").state_dict()
