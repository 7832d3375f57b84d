"""RNN encoder-decoders: every (score, window, cell) combination runs, decodes step by step
exactly as the teacher-forced pass computes, and overfits a small batch."""

import itertools

import pytest
import torch

from attnseq.config.choices import ModelFamily
from attnseq.config.schema import ModelConfig
from attnseq.errors import UserError
from attnseq.models import Vocabularies, build_model
from attnseq.models.objective import sequence_loss
from attnseq.models.rnn import RNNSeq2Seq

PAD, BOS, EOS = 0, 2, 3
SCORES = ["additive", "dot", "general", "concat", "location", "scaled_dot"]
WINDOWS = ["global", "local_m", "local_p"]
CELLS = ["gru", "lstm"]


def make_model(
    style: str,
    score: str,
    window: str = "global",
    cell: str = "gru",
    input_feeding: bool = True,
    layers: int = 1,
    dropout: float = 0.0,
    init_hidden: str = "bridge",
) -> RNNSeq2Seq:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(
        OmegaConf.merge(
            OmegaConf.structured(ModelConfig),
            {
                "family": "rnn",
                "decoder": style,
                "emb_dim": 12,
                "hidden": 16,
                "dropout": dropout,
                "input_feeding": input_feeding,
                "max_positions": 32,
                "rnn": {
                    "cell": cell,
                    "layers": layers,
                    "bidirectional": True,
                    "init_hidden": init_hidden,
                },
                "attention": {"score": score, "window": window, "D": 2},
            },
        )
    )
    assert cfg.family is ModelFamily.rnn
    model = build_model(cfg, Vocabularies(14, 14, PAD, BOS, EOS))
    assert isinstance(model, RNNSeq2Seq)
    return model


def toy_batch(seed: int = 0, batch: int = 6, length: int = 6):
    """Reversal of random sequences with different lengths (padding included)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, length + 1, (batch,), generator=generator)
    lengths[0] = length
    src = torch.full((batch, length), PAD)
    tgt_in = torch.full((batch, length + 1), PAD)
    tgt_out = torch.full((batch, length + 1), PAD)
    for row, n in enumerate(lengths.tolist()):
        tokens = torch.randint(4, 14, (n,), generator=generator)
        src[row, :n] = tokens
        target = tokens.flip(0)
        tgt_in[row, 0], tgt_in[row, 1 : n + 1] = BOS, target
        tgt_out[row, :n], tgt_out[row, n] = target, EOS
    return src, lengths, tgt_in, tgt_out


def step_by_step(model: RNNSeq2Seq, src, lengths, tgt_in):
    state = model.start_decoding(src, lengths)
    logits, weights = [], []
    for t in range(tgt_in.size(1)):
        step_logits, step_weights, state = model.decode_step(tgt_in[:, t], state, True)
        logits.append(step_logits)
        weights.append(step_weights)
    return torch.stack(logits, 1), (None if weights[0] is None else torch.stack(weights, 1))


COMBOS = [("bahdanau", s, w, c, True) for s, w, c in itertools.product(SCORES, WINDOWS, CELLS)] + [
    ("luong", s, w, c, feed)
    for s, w, c, feed in itertools.product(SCORES, WINDOWS, CELLS, [True, False])
]


@pytest.mark.parametrize(("style", "score", "window", "cell", "feed"), COMBOS)
def test_incremental_decoding_equals_teacher_forcing(style, score, window, cell, feed) -> None:
    torch.manual_seed(0)
    model = make_model(style, score, window, cell, feed).eval()
    src, lengths, tgt_in, _ = toy_batch()
    full = model(src, lengths, tgt_in, need_weights=True)
    logits, weights = step_by_step(model, src, lengths, tgt_in)
    torch.testing.assert_close(logits, full.logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, full.attention, atol=1e-6, rtol=1e-5)
    assert full.attention.shape == (src.size(0), tgt_in.size(1), src.size(1))
    # padding gets exactly zero weight
    pad = (src == PAD).unsqueeze(1).expand_as(full.attention)
    assert torch.all(full.attention[pad] == 0)


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_decode_step_in_training_mode_drops_out_where_forward_does(style: str) -> None:
    """With dropout 1 every dropout site outputs zeros whatever its mask, so the step-by-step
    pass in training mode equals forward exactly when both drop out at the same sites (the
    reference path of benchmarks/check_loss_curve.py trains through decode_step)."""
    torch.manual_seed(0)
    model = make_model(style, "additive", dropout=1.0).train()
    src, lengths, tgt_in, _ = toy_batch()
    logits, _ = step_by_step(model, src, lengths, tgt_in)
    torch.testing.assert_close(logits, model(src, lengths, tgt_in).logits)


def test_no_attention_baseline_returns_no_weights() -> None:
    model = make_model("bahdanau", "none").eval()
    src, lengths, tgt_in, _ = toy_batch()
    assert model(src, lengths, tgt_in, need_weights=True).attention is None
    logits, weights = step_by_step(model, src, lengths, tgt_in)
    torch.testing.assert_close(logits, model(src, lengths, tgt_in).logits, atol=1e-5, rtol=1e-4)
    assert weights is None


def test_stacked_layers_and_reorder_state() -> None:
    torch.manual_seed(0)
    model = make_model("luong", "general", layers=2, cell="lstm").eval()
    src, lengths, tgt_in, _ = toy_batch()
    state = model.start_decoding(src, lengths)
    index = torch.tensor([1, 1, 0])
    state = model.reorder_state(state, index)
    logits, _, _ = model.decode_step(tgt_in[index, 0], state)
    expected, _ = step_by_step(model, src[index], lengths[index], tgt_in[index, :1])
    torch.testing.assert_close(logits, expected[:, 0], atol=1e-6, rtol=1e-5)


def overfit(model: RNNSeq2Seq, steps: int = 400, lr: float = 0.03) -> float:
    """Train on one batch until every target token is predicted; return final accuracy."""
    torch.manual_seed(0)
    src, lengths, tgt_in, tgt_out = toy_batch(seed=1, batch=8, length=5)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    real = tgt_out != PAD
    accuracy = 0.0
    for _ in range(steps):
        model.train()
        output = model(src, lengths, tgt_in)
        loss, n = sequence_loss(output.logits, tgt_out, PAD)
        optimizer.zero_grad()
        (loss / n).backward()
        optimizer.step()
        predicted = output.logits.argmax(-1)
        accuracy = float((predicted == tgt_out)[real].float().mean())
        if accuracy == 1.0 and float(loss.detach() / n) < 0.05:
            break
    return accuracy


def combinations() -> list:
    """Every (score, window, cell); the default run keeps a pairwise cover (every score with
    every window, the cells alternating, so every score and every window meets both cells),
    `-m slow` all of them."""
    cases = []
    for (i, score), (j, window), (k, cell) in itertools.product(
        enumerate(SCORES), enumerate(WINDOWS), enumerate(CELLS)
    ):
        marks = () if (i + j) % len(CELLS) == k else pytest.mark.slow
        cases.append(pytest.param(score, window, cell, marks=marks))
    return cases


@pytest.mark.parametrize(("score", "window", "cell"), combinations())
def test_every_combination_overfits_a_batch(score: str, window: str, cell: str) -> None:
    style = "bahdanau" if score == "additive" else "luong"
    model = make_model(style, score, window, cell)
    assert overfit(model) == 1.0


@pytest.mark.parametrize("style", ["bahdanau", "luong"])
def test_zero_initial_state_has_no_bridge_and_still_learns(style: str) -> None:
    """model.rnn.init_hidden=zero: s_0 = 0 for every layer, no bridge parameters; step-by-step
    decoding still matches teacher forcing."""
    model = make_model(style, "general", cell="lstm", layers=2, init_hidden="zero").eval()
    assert model.bridge is None
    assert not any("bridge" in name for name, _ in model.named_parameters())
    src, lengths, tgt_in, _ = toy_batch()
    state = model.start_decoding(src, lengths)
    assert torch.all(state["hidden"] == 0) and state["hidden"].shape == (src.size(0), 2, 16)
    logits, _ = step_by_step(model, src, lengths, tgt_in)
    torch.testing.assert_close(logits, model(src, lengths, tgt_in).logits, atol=1e-5, rtol=1e-4)
    assert overfit(make_model(style, "general", init_hidden="zero")) == 1.0


@pytest.mark.slow
def test_bahdanau_dot_and_none_overfit() -> None:
    assert overfit(make_model("bahdanau", "dot")) == 1.0
    assert overfit(make_model("bahdanau", "none"), steps=600) == 1.0


@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("tie", [True, False])
def test_joint_vocabulary_shares_source_target_and_output_embeddings(family, tie) -> None:
    """With one tokenizer for both sides (a joint sentencepiece model) and tie_embeddings, the
    encoder's embedding, the decoder's and the output projection are one matrix."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_object(
        OmegaConf.merge(
            OmegaConf.structured(ModelConfig),
            {
                "family": family,
                "emb_dim": 8,
                "hidden": 16,
                "d_model": 16,
                "heads": 2,
                "ff_dim": 32,
                "enc_layers": 1,
                "dec_layers": 1,
                "tie_embeddings": tie,
            },
        )
    )
    joint = build_model(cfg, Vocabularies(14, 14, PAD, BOS, EOS, joint=True))
    separate = build_model(cfg, Vocabularies(14, 14, PAD, BOS, EOS, joint=False))
    if family == "rnn":
        src_emb = lambda m: m.encoder.embedding.weight  # noqa: E731
        tgt_emb = lambda m: m.embedding.weight  # noqa: E731
        out = lambda m: m.output.weight  # noqa: E731
    else:
        src_emb = lambda m: m.src_embed.weight  # noqa: E731
        tgt_emb = lambda m: m.tgt_embed.weight  # noqa: E731
        out = lambda m: m.output_proj.weight  # noqa: E731
    assert (src_emb(joint) is tgt_emb(joint)) == tie
    assert (out(joint) is tgt_emb(joint)) == tie
    assert src_emb(separate) is not tgt_emb(separate)
    n_joint = sum(p.numel() for p in joint.parameters())
    n_separate = sum(p.numel() for p in separate.parameters())
    width = 8 if family == "rnn" else 16
    assert n_separate - n_joint == (14 * width if tie else 0)
    if tie:
        with pytest.raises(UserError, match="equal vocabulary sizes"):
            build_model(cfg, Vocabularies(10, 14, PAD, BOS, EOS, joint=True))
