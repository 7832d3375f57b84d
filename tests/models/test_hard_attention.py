"""Hard attention (attention/hard.py, models/hard_attention.py) and its REINFORCE term
(models/objective.py)."""

from pathlib import Path

import pytest
import torch

from attnseq.attention import build_attention
from attnseq.attention.hard import HardSelector, reinforce_sample, straight_through_gumbel
from attnseq.errors import UserError
from attnseq.models.hard_attention import HardAttentionRNN, HardAttentionTransformer
from attnseq.models.objective import reinforce_term, update_baseline
from attnseq.models.seq2seq import Vocabularies

VOCAB = Vocabularies(src_size=12, tgt_size=12, pad_id=0, bos_id=2, eos_id=3)


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


def _rnn(hard: str, k: int = 1) -> HardAttentionRNN:
    torch.manual_seed(0)
    attention = build_attention("additive", 16, 16, attn_dim=16)
    return HardAttentionRNN(
        VOCAB, hard=hard, hard_k=k, attention=attention, emb_dim=8, enc_hidden=8, hidden=16
    )


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src = torch.tensor([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]])
    return src, torch.tensor([5, 3]), torch.tensor([[2, 7, 6, 5], [2, 9, 8, 0]])


def test_rnn_eval_one_hot_and_cache_equals_forward() -> None:
    for hard, k in (("gumbel", 1), ("reinforce", 2)):
        model = _rnn(hard, k).eval()
        src, lengths, tgt_in = _batch()
        with torch.no_grad():
            out = model(src, lengths, tgt_in, need_weights=True)
            weights = out.attention
            assert weights is not None
            assert torch.allclose(weights.sum(-1), torch.ones(2, 4))
            assert set(weights.unique().tolist()) <= {0.0, 1.0 / k, 1.0}
            assert weights[1, :, 3:].abs().sum() == 0
            state = model.start_decoding(src, lengths)
            for t in range(tgt_in.size(1)):
                logits, step_weights, state = model.decode_step(tgt_in[:, t], state, True)
                assert torch.allclose(logits, out.logits[:, t], atol=1e-5)
                assert torch.equal(step_weights, weights[:, t])


def test_rnn_reinforce_training_returns_sample_and_gradients() -> None:
    model = _rnn("reinforce").train()
    src, lengths, tgt_in = _batch()
    out = model(src, lengths, tgt_in)
    assert out.reinforce.log_prob.shape == (2, 4)
    assert bool((out.reinforce.log_prob <= 0).all())
    out.reinforce.log_prob.sum().backward()
    assert model.attention.content.energy.weight.grad.abs().sum() > 0
    assert "baseline.value" in model.state_dict()


def test_transformer_hard_cache_equals_forward() -> None:
    torch.manual_seed(0)
    model = HardAttentionTransformer(
        VOCAB, hard="reinforce", d_model=16, heads=2, enc_layers=1, dec_layers=2, ff_dim=32
    )
    src, lengths, tgt_in = _batch()
    model.train()
    assert model(src, lengths, tgt_in).reinforce.entropy.shape == (2, 4)
    model.eval()
    with torch.no_grad():
        out = model(src, lengths, tgt_in, need_weights=True)
        assert set(out.attention.unique().tolist()) <= {0.0, 1.0}
        state = model.start_decoding(src, lengths)
        for t in range(tgt_in.size(1)):
            logits, _, state = model.decode_step(tgt_in[:, t], state)
            assert torch.allclose(logits, out.logits[:, t], atol=1e-5)


def test_selector_temperature_not_in_state_dict() -> None:
    assert "temperature" not in HardSelector("gumbel").state_dict()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.attention.hard_k=2"], "hard_k=2 chooses positions for hard attention"),
        (["model.attention.hard=gumbel", "model.copy=true"], "not supported with model.copy"),
        (["model.attention.hard=reinforce", "model.coverage=true"], "model.coverage"),
        (["model.attention.hard=gumbel", "model.attention.window=local_p"], "window=global"),
        (["model.attention.hard=gumbel", "model.attention.hierarchy=sentence"], "hierarchy"),
        (
            [
                "model.family=transformer",
                "model.attention.hard=gumbel",
                "model.attention.memory_slots=2",
                "model.attention.memory_in_cross=true",
            ],
            "memory_in_cross",
        ),  # fmt: skip
    ],
)
def test_invalid_combinations_are_user_errors(overrides: list[str], message: str) -> None:
    from helpers import tiny_config

    with pytest.raises(UserError, match="invalid configuration") as error:
        tiny_config(*overrides)
    assert message in str(error.value)


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_checkpoint_round_trip_keeps_the_hard_model(family: str, tmp_path: Path) -> None:
    """A saved hard-attention model loads as the same class with the same weights, including
    REINFORCE's moving-average baseline, and decodes one-hot."""
    from helpers import untrained_checkpoint

    from attnseq.models.loading import load_trained_model

    path = untrained_checkpoint(
        tmp_path / "hard.pt", f"model.family={family}", "model.attention.hard=reinforce"
    )
    first, second = load_trained_model(path).model, load_trained_model(path).model
    assert type(first).__name__.startswith("HardAttention") and type(first) is type(second)
    for (name, a), (_, b) in zip(
        first.state_dict().items(), second.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=name)
    assert any("baseline" in name for name in first.state_dict())
