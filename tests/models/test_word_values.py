"""What an RNN attention reads (`model.attention.values`, models/rnn.py): the annotations h_j,
or each source word with its position, v_j = W_v [x_j ; p_j], p_j = [PE(j) ; PE(n-1-j)], while
the scores read k_j = h_j + W_p p_j (`WordValues`, models/rnn.py)."""

from pathlib import Path

import pytest
import torch

from attnseq.attention import build_attention
from attnseq.errors import UserError
from attnseq.models.hard_attention import HardAttentionRNN
from attnseq.models.positional import SinusoidalPositionalEncoding
from attnseq.models.rnn import POSITION_SIZE, RNNSeq2Seq, WordValues
from attnseq.models.seq2seq import Vocabularies

VOCAB = Vocabularies(src_size=12, tgt_size=12, pad_id=0, bos_id=2, eos_id=3)


def _model(values: str, hard: str | None = None, style: str = "bahdanau") -> RNNSeq2Seq:
    torch.manual_seed(0)
    options = {
        "attention": build_attention("additive", 16, 16, attn_dim=16),
        "emb_dim": 8,
        "enc_hidden": 8,
        "hidden": 16,
        "style": style,
        "values": values,
    }
    if hard is None:
        return RNNSeq2Seq(VOCAB, **options)
    return HardAttentionRNN(VOCAB, hard=hard, **options)


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src = torch.tensor([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]])
    return src, torch.tensor([5, 3]), torch.tensor([[2, 7, 6, 5], [2, 9, 8, 0]])


def _where(src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """p_j (B, S, P) from the formula, row by row."""
    positions = SinusoidalPositionalEncoding(POSITION_SIZE)
    j = torch.arange(src.size(1))
    return torch.stack(
        [
            torch.cat([positions(j), positions((length - 1 - j).clamp_min(0))], dim=-1)
            for length in lengths.tolist()
        ]
    )


def _word_values(model: RNNSeq2Seq, src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """v_j (B, S, E), computed from the formula without the model's code path."""
    assert model.word_values is not None
    words = torch.cat([model.encoder.embedding(src), _where(src, lengths)], dim=-1)
    return words @ model.word_values.projection.weight.T


def test_a_value_holds_its_word_and_both_distances_only() -> None:
    """Changing a neighbour's word leaves v_j as it is; the same word elsewhere differs; the
    keys are the annotations moved by the positions alone."""
    torch.manual_seed(0)
    values = WordValues(4, 6)
    embedded, annotations = torch.randn(1, 5, 4), torch.randn(1, 5, 6)
    changed = embedded.clone()
    changed[0, 3] = torch.randn(4)
    lengths = torch.tensor([5])
    (before, keys), (after, _) = (
        values(embedded, annotations, lengths),
        values(changed, annotations, lengths),
    )
    torch.testing.assert_close(before[0, [0, 1, 2, 4]], after[0, [0, 1, 2, 4]])
    moved = _where(embedded, lengths) @ values.key_positions.weight.T
    torch.testing.assert_close(keys, annotations + moved)
    repeated = embedded[:, [1, 1]]
    twice, _ = values(repeated, annotations[:, :2], torch.tensor([2]))  # (1, 2, 6)
    assert not torch.allclose(twice[0, 0], twice[0, 1])


@pytest.mark.parametrize("hard", [None, "gumbel"])
def test_the_context_averages_the_source_words(hard: str | None) -> None:
    """Soft: c = sum_j a_j W_v x_j; hard (evaluation, one-hot): c = W_v x of the chosen word."""
    model = _model("embeddings", hard).eval()
    src, lengths, _ = _batch()
    state = model.start_decoding(src, lengths)
    query = state["hidden"][:, -1:]  # s_0: (B, 1, H)
    positions = state["step"].unsqueeze(1)
    with torch.no_grad():
        context, weights = model._attend(query, state, positions)
        expected = torch.bmm(weights, _word_values(model, src, lengths))
    torch.testing.assert_close(context, expected)
    if hard is not None:
        chosen = weights.argmax(-1)  # (B, 1)
        words = _word_values(model, src, lengths)
        picked = words.gather(1, chosen[..., None].expand(-1, -1, 16))
        torch.testing.assert_close(context, picked.detach())


def test_the_scores_do_not_read_the_values() -> None:
    """Changing W_v changes the context but not the weights: the keys are not v_j."""
    model = _model("embeddings").eval()
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        before = model(src, lengths, tgt_in[:, :1], need_weights=True).attention
        model.word_values.projection.weight.mul_(3.0)
        after = model(src, lengths, tgt_in[:, :1], need_weights=True).attention
    torch.testing.assert_close(before, after)


@pytest.mark.parametrize(
    ("hard", "style"), [(None, "bahdanau"), (None, "luong"), ("gumbel", "bahdanau")]
)
def test_decoding_with_the_cache_equals_the_full_forward(hard: str | None, style: str) -> None:
    model = _model("embeddings", hard, style).eval()
    src, lengths, tgt_in = _batch()
    with torch.no_grad():
        out = model(src, lengths, tgt_in, need_weights=True)
        state = model.start_decoding(src, lengths)
        for t in range(tgt_in.size(1)):
            logits, weights, state = model.decode_step(tgt_in[:, t], state, True)
            torch.testing.assert_close(logits, out.logits[:, t], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(weights, out.attention[:, t])


def test_the_words_train_through_the_context() -> None:
    model = _model("embeddings", "gumbel").train()
    src, lengths, tgt_in = _batch()
    model(src, lengths, tgt_in).logits.sum().backward()
    assert model.word_values.projection.weight.grad.abs().sum() > 0


def test_annotations_add_no_parameters() -> None:
    """The default keeps the state dict of every model saved before the option existed."""
    annotations, embeddings = _model("annotations"), _model("embeddings")
    extra = set(embeddings.state_dict()) - set(annotations.state_dict())
    assert extra == {"word_values.projection.weight", "word_values.key_positions.weight"}


def test_a_bad_value_or_no_attention_is_refused() -> None:
    with pytest.raises(ValueError, match="values must be"):
        _model("words")
    with pytest.raises(ValueError, match="has none"):
        RNNSeq2Seq(VOCAB, attention=None, values="embeddings")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.family=transformer"], "values=embeddings is an RNN setting"),
        (["model.attention.score=none"], "score=none has none"),
        (["model.copy=true"], "not supported with model.copy"),
        (["model.coverage=true"], "not supported with model.coverage"),
        (["model.attention.hierarchy=sentence"], "hierarchy=sentence"),
    ],
)
def test_invalid_combinations_are_user_errors(overrides: list[str], message: str) -> None:
    from helpers import tiny_config

    with pytest.raises(UserError, match="invalid configuration") as error:
        tiny_config("model.attention.values=embeddings", *overrides)
    assert message in str(error.value)


def test_a_checkpoint_keeps_the_word_values(tmp_path: Path) -> None:
    from helpers import untrained_checkpoint

    from attnseq.models.loading import load_trained_model

    path = untrained_checkpoint(
        tmp_path / "words.pt", "model.attention.hard=gumbel", "model.attention.values=embeddings"
    )
    model = load_trained_model(path).model
    assert isinstance(model, HardAttentionRNN) and model.word_values is not None
