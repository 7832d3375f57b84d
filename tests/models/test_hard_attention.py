"""The hard-attention models (models/hard_attention.py): one-hot weights and a cache equal to the
forward pass, REINFORCE samples in training, the combinations refused, a checkpoint round trip.
The selection itself is tested in tests/attention/test_hard.py."""

from pathlib import Path

import pytest
import torch

from attnseq.attention import build_attention
from attnseq.errors import UserError
from attnseq.models.hard_attention import HardAttentionRNN, HardAttentionTransformer
from attnseq.models.seq2seq import Vocabularies

VOCAB = Vocabularies(src_size=12, tgt_size=12, pad_id=0, bos_id=2, eos_id=3)


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
        ),
    ],
)
def test_invalid_combinations_are_user_errors(overrides: list[str], message: str) -> None:
    from helpers import tiny_config

    with pytest.raises(UserError, match="invalid configuration") as error:
        tiny_config(*overrides)
    assert message in str(error.value)


@pytest.mark.slow
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
