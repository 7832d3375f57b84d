"""Forced word alignment (attnseq/analysis/forced_alignment.py): Pharaoh round trip, the
attention and Shift-Att rows on a hand-made attention matrix, the piece -> word merge, batching
that changes nothing, and the map choice."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import untrained_checkpoint
from torch import nn

from attnseq.analysis.alignment import (
    argmax_alignment,
    format_pharaoh,
    read_pharaoh,
    word_ids,
    write_pharaoh,
)
from attnseq.analysis.forced_alignment import (
    AlignmentMethod,
    align_sentences,
    forced_word_attention,
    select_map,
)
from attnseq.errors import UserError
from attnseq.models.loading import load_trained_model

# decoder steps of "x y z" (rows) over the source "a b" (columns): step t has input y_{t-1}
HAND_MADE = torch.tensor(
    [
        [0.9, 0.1],  # input <s>, predicts x
        [0.2, 0.8],  # input x, predicts y
        [0.7, 0.3],  # input y, predicts z
        [0.4, 0.6],  # input z, predicts </s>
    ]
)


class FixedAttention(nn.Module):
    """A stand-in model whose cross-attention is HAND_MADE, whatever the input."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def forward(self, src, src_lengths, tgt_in, need_weights=False):
        assert tgt_in.shape == (1, 4) and need_weights
        return SimpleNamespace(attention=HAND_MADE[None])  # (B, T, S)


def hand_made_links(target_word_ids: list[int], shift: bool) -> tuple[torch.Tensor, set]:
    example = ([5, 6], [7, 8, 9])
    words = ([0, 1], target_word_ids)
    ((index, pooled),) = forced_word_attention(FixedAttention(), [example], [words], shift=shift)
    assert index == 0
    return pooled, argmax_alignment(pooled)


def test_pharaoh_round_trip(tmp_path: Path) -> None:
    alignments = [{(0, 0), (2, 1), (1, 1), (10, 3)}, set(), {(3, 0)}]
    write_pharaoh(tmp_path / "a.pharaoh", alignments)
    text = (tmp_path / "a.pharaoh").read_text()
    assert text == "0-0 1-1 2-1 10-3\n\n3-0\n"  # sorted by (source, target), 0-based
    sure, possible = read_pharaoh(tmp_path / "a.pharaoh")
    assert sure == alignments and possible == alignments
    line = format_pharaoh({(1, 2)}, possible={(0, 0), (1, 2)})
    assert line == "0?0 1-2" and read_pharaoh([line]) == ([{(1, 2)}], [{(0, 0), (1, 2)}])


def test_attention_reads_the_row_that_predicts_each_word() -> None:
    pooled, links = hand_made_links([0, 1, 2], shift=False)
    assert torch.equal(pooled, HAND_MADE[:3])  # the </s> row is dropped
    assert links == {(0, 0), (1, 1), (0, 2)}  # x -> a, y -> b, z -> a


def test_shift_att_reads_the_row_whose_input_is_each_word() -> None:
    pooled, links = hand_made_links([0, 1, 2], shift=True)
    assert torch.equal(pooled, HAND_MADE[1:])  # x: row 1, y: row 2, z: the </s> step's row 3
    assert links == {(1, 0), (0, 1), (1, 2)}  # x -> b, y -> a, z -> b


def test_shift_att_merges_a_word_s_pieces() -> None:
    # "x" "y" "z" as pieces of two words, "x" and "yz" (e.g. ▁x ▁y z): the word "yz" takes
    # the mean of the rows whose inputs are y and z: (0.7 + 0.4) / 2, (0.3 + 0.6) / 2
    pooled, links = hand_made_links(word_ids(["▁x", "▁y", "z"], "sentencepiece"), shift=True)
    assert torch.allclose(pooled, torch.tensor([[0.2, 0.8], [0.55, 0.45]]))
    assert links == {(1, 0), (0, 1)}


@pytest.fixture(scope="module")
def dates_checkpoint(tmp_path_factory) -> Path:
    """An untrained GRU + Bahdanau model on the char-level dates task."""
    return untrained_checkpoint(tmp_path_factory.mktemp("dates") / "best.pt")


def test_char_pieces_merge_into_whitespace_words(dates_checkpoint: Path) -> None:
    trained = load_trained_model(dates_checkpoint)
    src, tgt = "7th of November, 1990", "1990-11-07 x"
    result = align_sentences(trained, [src], [tgt], AlignmentMethod("attention"))
    soft = result.soft[0]
    assert soft.shape == (2, 4)  # target words x source words
    # by hand: a target word's row is the mean over its chars' rows, a source word's column the
    # sum over its chars' columns; spaces belong to no word
    src_ids, tgt_ids = trained.tokenizers.src.encode(src), trained.tokenizers.tgt.encode(tgt)
    with torch.no_grad():
        attention = trained.model(
            torch.tensor([src_ids]), torch.tensor([len(src_ids)]),
            torch.tensor([[trained.model.bos_id, *tgt_ids]]), need_weights=True,
        ).attention[0]  # fmt: skip
    expected = np.zeros((2, 4))
    for a, (t_start, t_end) in enumerate([(0, 10), (11, 12)]):
        for b, (s_start, s_end) in enumerate([(0, 3), (4, 6), (7, 16), (17, 21)]):
            expected[a, b] = attention[t_start:t_end, s_start:s_end].sum(1).mean().item()
    assert np.allclose(soft, expected, atol=1e-6)
    assert result.links == [{(int(soft[0].argmax()), 0), (int(soft[1].argmax()), 1)}]
    # every row sums to its mass on words: 1 minus what the chars gave to spaces
    assert np.all(soft.sum(1) <= 1 + 1e-6) and np.all(soft.sum(1) > 0.5)


def test_batches_and_padding_change_nothing(dates_checkpoint: Path) -> None:
    trained = load_trained_model(dates_checkpoint)
    src = ["7th of November, 1990", "03 Nov 25", "13-01-2004", "the 3rd of March 1998"]
    tgt = ["1990-11-07", "2025-11-03", "2004-01-13", "1998 03 03"]
    for method in (AlignmentMethod("attention"), AlignmentMethod("shift-att")):
        one = align_sentences(trained, src, tgt, method, batch_size=1)
        all_four = align_sentences(trained, src, tgt, method, batch_size=4)
        assert one.links == all_four.links
        for a, b in zip(one.soft, all_four.soft, strict=True):
            assert np.allclose(a, b, atol=1e-6)
    plain = align_sentences(trained, src, tgt, AlignmentMethod("attention")).soft
    shifted = align_sentences(trained, src, tgt, AlignmentMethod("shift-att")).soft
    assert not np.allclose(shifted[3], plain[3], atol=1e-4)  # shift-att reads other rows


def test_select_map_picks_a_layer_and_head_or_their_mean() -> None:
    pooled = torch.arange(2 * 3 * 2 * 2, dtype=torch.float).reshape(2, 3, 2, 2)  # (L, H, Tw, Sw)
    assert torch.equal(select_map(pooled, AlignmentMethod(layer=1, head=3)), pooled[0, 2])
    assert torch.equal(select_map(pooled, AlignmentMethod()), pooled[1].mean(0))
    assert torch.equal(select_map(pooled[0, 0], AlignmentMethod()), pooled[0, 0])  # an RNN's
    with pytest.raises(ValueError, match="1..3"):
        select_map(pooled, AlignmentMethod(head=4))


def test_library_errors_name_the_problem(dates_checkpoint: Path) -> None:
    trained = load_trained_model(dates_checkpoint)
    with pytest.raises(UserError, match=r"--layer must be in 1\.\.1 .*RNN's attention is one"):
        align_sentences(trained, ["a"], ["b"], AlignmentMethod(layer=2))
    with pytest.raises(UserError, match="2 source lines but 1 target"):
        align_sentences(trained, ["a", "b"], ["c"])
    with pytest.raises(UserError, match="target line 2 is empty"):
        align_sentences(trained, ["a", "b"], ["c", " "])
    with pytest.raises(UserError, match="--method must be one of attention, shift-att"):
        align_sentences(trained, ["a"], ["b"], AlignmentMethod("best"))


def test_transformer_cross_attention_is_the_forward_s(tmp_path: Path) -> None:
    """The lean pass that alignment runs (no logits, fused encoder) returns the cross-attention
    of the model's forward with need_weights, and one layer's pooling reads that layer."""
    from attnseq.analysis.forced_alignment import _transformer_cross_attention
    from attnseq.data.batching import collate

    checkpoint = untrained_checkpoint(
        tmp_path / "t.pt", "model.family=transformer", "model.dec_layers=2", "model.heads=2"
    )
    trained = load_trained_model(checkpoint)
    model = trained.model.eval()
    src = ["7th of November, 1990", "03 Nov 25"]
    tgt = ["1990-11-07", "2025-11-03"]
    examples = [
        (trained.tokenizers.src.encode(s), trained.tokenizers.tgt.encode(t))
        for s, t in zip(src, tgt, strict=True)
    ]
    batch = collate(examples, [0, 1], pad_id=model.pad_id, bos_id=model.bos_id, eos_id=model.eos_id)
    with torch.no_grad():
        lean = _transformer_cross_attention(model, batch.src, batch.src_lengths, batch.tgt_in)
        full = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True).attention
    torch.testing.assert_close(lean, full, atol=1e-5, rtol=1e-4)
    for layer in (1, 2):
        for head in (None, 2):
            method = AlignmentMethod("attention", layer, head)
            one = align_sentences(trained, src, tgt, method).soft
            words = [
                (word_ids(trained.tokenizers.src.pieces(s), "char"),
                 word_ids(trained.tokenizers.tgt.pieces(t), "char"))
                for s, t in zip(src, tgt, strict=True)
            ]  # fmt: skip
            pooled = dict(forced_word_attention(model, examples, words))  # every layer
            for i in range(2):
                assert np.allclose(one[i], select_map(pooled[i], method).numpy(), atol=1e-6)
