"""Hierarchical attention (Nallapati et al. 2016, section 2.4): the combined weights sum to one
and factor into segment x word, a zero-weight segment contributes nothing, the two-level encoder
reads each segment on its own, cached decoding equals the full forward (plain, Luong, and
pointer-generator with coverage), and a checkpoint round trip keeps the outputs."""

import pytest
import torch
from helpers import tiny_config, untrained_checkpoint

from attnseq.attention.hierarchical import combine_hierarchical
from attnseq.data.prepare import train_tokenizers
from attnseq.decoding import greedy_decode
from attnseq.decoding.beam_search import beam_search
from attnseq.decoding.settings import DecodingSettings
from attnseq.models.loading import load_trained_model, model_for
from attnseq.models.rnn_hierarchical import (
    HierarchicalPointerRNN,
    HierarchicalRNNSeq2Seq,
    segment_layout,
)

PAIRS = [
    ("#Person1#: hello there . how are you ? #Person2#: fine thanks . #Person1#: good", "hi"),
    ("#Person1#: where is it ? #Person2#: here .", "place"),
    ("A cat sat. The dog ran! Mr. Smith came.", "animals ran"),
]


def test_weights_sum_to_one_and_factor_into_segment_times_word() -> None:
    alpha = torch.tensor([[[0.1, 0.2, 0.3, 0.4, 0.0]]])  # (1, 1, S): the last is padding
    beta = torch.tensor([[[0.25, 0.75]]])  # (1, 1, N)
    segments = torch.tensor([[0, 0, 1, 1, -1]])
    combined = combine_hierarchical(alpha, beta, segments)
    # by hand: alpha * beta_s = .025 .05 .225 .3, total .6
    expected = torch.tensor([[[0.025, 0.05, 0.225, 0.3, 0.0]]]) / 0.6
    torch.testing.assert_close(combined, expected)
    assert combined.sum().item() == pytest.approx(1.0)
    # P(j) = P(s(j)) * alpha_j / A_s(j), with P(s) = beta_s A_s / sum_r beta_r A_r
    mass = torch.stack([combined[..., :2].sum(-1), combined[..., 2:4].sum(-1)], dim=-1)  # (1, 1, N)
    area = torch.tensor([0.3, 0.7])
    torch.testing.assert_close(mass[0, 0], beta[0, 0] * area / (beta[0, 0] * area).sum())
    within = alpha[0, 0, :4] / area[segments[0, :4]]
    torch.testing.assert_close(combined[0, 0, :4], mass[0, 0, segments[0, :4]] * within)


def test_a_segment_with_zero_weight_contributes_nothing() -> None:
    alpha = torch.softmax(torch.randn(2, 3, 6), dim=-1)
    beta = torch.tensor([0.0, 0.6, 0.4]).expand(2, 3, 3)
    segments = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 2]])
    combined = combine_hierarchical(alpha, beta, segments)
    assert (combined.masked_select((segments == 0).unsqueeze(1).expand_as(combined)) == 0).all()
    torch.testing.assert_close(combined.sum(-1), torch.ones(2, 3))
    # one segment with all the weight: the word attention, unchanged
    one = combine_hierarchical(alpha, torch.ones(2, 3, 1), torch.zeros(2, 6, dtype=torch.long))
    torch.testing.assert_close(one, alpha)


def test_an_empty_row_stays_zero_without_nan() -> None:
    combined = combine_hierarchical(
        torch.zeros(1, 1, 3), torch.zeros(1, 1, 1), torch.zeros(1, 3).long()
    )
    assert torch.equal(combined, torch.zeros(1, 1, 3))


def test_segment_layout_packs_each_segment_in_its_own_row() -> None:
    segments = torch.tensor([[0, 0, 0, 1, 1], [0, 1, 2, -1, -1]])
    layout = segment_layout(segments)
    assert layout.counts.tolist() == [[3, 2, 0], [1, 1, 1]]
    assert layout.width == 3
    # row b*N + s, position within the segment: b0 s0 -> 0,1,2; b0 s1 -> 3,4 (row 1 * 3)
    assert layout.flat[0].tolist() == [0, 1, 2, 3, 4]
    assert layout.flat[1, :3].tolist() == [9, 12, 15]  # rows 3, 4, 5 at position 0


def model_and_batch(*overrides: str):
    cfg = tiny_config(
        "data.tokenizer=word", "model.attention.hierarchy=sentence", "model.dropout=0.0", *overrides
    )
    tokenizers = train_tokenizers(cfg.data, PAIRS)
    torch.manual_seed(0)
    model = model_for(cfg, tokenizers).eval()
    ids = [tokenizers.src.encode(src) for src, _ in PAIRS]
    width = max(map(len, ids))
    src = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    lengths = torch.tensor([len(row) for row in ids])
    size = tokenizers.tgt.vocab_size
    copy_inputs = {}
    if cfg.model.copy:  # a source in the target vocabulary (word ids past it read as <unk>)
        copy_inputs = {"src_ext": src.masked_fill(src >= size, 1), "n_oov": 0}
    return model, src, lengths, copy_inputs, size


CASES = [
    ("bahdanau", [], HierarchicalRNNSeq2Seq),
    ("luong-feeding", ["model.decoder=luong"], HierarchicalRNNSeq2Seq),
    (
        "luong-parallel",
        ["model.decoder=luong", "model.input_feeding=false", "model.attention.score=general"],
        HierarchicalRNNSeq2Seq,
    ),
    ("lstm-2-layers", ["model.rnn.cell=lstm", "model.rnn.layers=2"], HierarchicalRNNSeq2Seq),
    ("pointer-coverage", ["model.copy=true", "model.coverage=true"], HierarchicalPointerRNN),
]


@pytest.mark.parametrize(("name", "overrides", "kind"), CASES, ids=[c[0] for c in CASES])
def test_cached_decoding_equals_the_full_forward(name, overrides, kind) -> None:
    model, src, lengths, copy_inputs, size = model_and_batch(*overrides)
    assert isinstance(model, kind)
    tgt_in = torch.tensor([[2, 4, 5, 6], [2, size - 1, 4, 0], [2, 5, 5, 5]])
    with torch.no_grad():
        full = model(src, lengths, tgt_in, need_weights=True, **copy_inputs)
        state = model.start_decoding(src, lengths, **copy_inputs)
        steps, weights, betas = [], [], []
        for t in range(tgt_in.size(1)):
            logits, step_weights, state = model.decode_step(tgt_in[:, t], state, need_weights=True)
            steps.append(logits)
            weights.append(step_weights)
            betas.append(state["segment_weights"])
    torch.testing.assert_close(torch.stack(steps, 1), full.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.stack(weights, 1), full.attention, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(torch.stack(betas, 1), full.extras["segment_attention"])
    assert full.extras["segments"].tolist()[1][:9] == [0, 0, 0, 0, 0, 1, 1, 1, -1]
    torch.testing.assert_close(full.attention.sum(-1), torch.ones(3, 4))
    beta = full.extras["segment_attention"]
    assert beta.shape == (3, 4, 3)
    assert (beta[1, :, 2] == 0).all()  # the second source has two segments
    torch.testing.assert_close(beta.sum(-1), torch.ones(3, 4))


@pytest.mark.parametrize("overrides", [[], ["model.copy=true", "model.coverage=true"]])
def test_greedy_and_beam_attention_match_the_forward(overrides) -> None:
    model, src, lengths, copy_inputs, _ = model_and_batch(*overrides)
    limits = torch.full((3,), 6)
    settings = DecodingSettings(beam=3, length_penalty=0.0)
    beams = beam_search(model, src, lengths, limits, settings, True, **copy_inputs)
    for hypotheses in (
        greedy_decode(model, src, lengths, limits, True, **copy_inputs),
        [nbest[0] for nbest in beams],
    ):
        for row, hypothesis in enumerate(hypotheses):
            rows, length = hypothesis.attention.shape[0], int(lengths[row])
            tgt_in = torch.tensor([[model.bos_id, *hypothesis.tokens][:rows]])
            one = {k: v[row : row + 1, :length] if torch.is_tensor(v) else v
                   for k, v in copy_inputs.items()}  # fmt: skip
            with torch.no_grad():
                full = model(src[row : row + 1, :length], lengths[row : row + 1], tgt_in,
                             need_weights=True, **one)  # fmt: skip
            torch.testing.assert_close(
                full.attention[0], hypothesis.attention, atol=1e-5, rtol=1e-4
            )


def test_a_checkpoint_round_trip_keeps_the_outputs(tmp_path) -> None:
    path = untrained_checkpoint(
        tmp_path / "h.pt",
        "data.tokenizer=word",
        "model.attention.hierarchy=sentence",
        "model.attention.max_segments=2",
        pairs=PAIRS,
    )
    trained = load_trained_model(path)
    assert isinstance(trained.model, HierarchicalRNNSeq2Seq)
    assert trained.model.segmenter.max_segments == 2
    src = torch.tensor([trained.tokenizers.src.encode(PAIRS[0][0])])
    lengths = torch.tensor([src.size(1)])
    tgt_in = torch.tensor([[2, 4, 4]])
    again = load_trained_model(path).model
    with torch.no_grad():
        first = trained.model(src, lengths, tgt_in, need_weights=True)
        second = again(src, lengths, tgt_in, need_weights=True)
    torch.testing.assert_close(first.logits, second.logits)
    assert first.extras["segment_attention"].shape == (1, 3, 2)  # three turns, capped at two


def test_without_a_segmenter_the_model_says_what_it_needs() -> None:
    from attnseq.models import build_model
    from attnseq.models.seq2seq import Vocabularies

    cfg = tiny_config("model.attention.hierarchy=sentence")
    model = build_model(cfg.model, Vocabularies(10, 10, 0, 2, 3))
    with pytest.raises(ValueError, match="segmenter"):
        model(torch.tensor([[5, 6]]), torch.tensor([2]), torch.tensor([[2, 5]]))
