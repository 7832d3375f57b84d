"""Word links (attnseq/alignment/word_links.py): piece -> word pooling, hard links, AER and
symmetrization. Reading gold files: tests/data/test_word_alignments.py."""

import numpy as np
import pytest
import torch
from torch import Tensor

from attnseq.alignment.word_links import (
    SYMMETRIZATIONS,
    alignment_error_rate,
    argmax_alignment,
    symmetrize,
    threshold_alignment,
    transpose,
    word_attention,
)


# ------------------------------------------------------------------------------ AER
def test_aer_precision_recall_by_hand_over_the_corpus() -> None:
    hyp = [{(0, 0), (1, 2), (2, 2)}, {(0, 1), (1, 0)}]
    sure = [{(0, 0), (1, 1)}, {(0, 1)}]
    possible = [{(0, 0), (1, 1), (1, 2)}, {(0, 1), (1, 0)}]
    # sentence 1: |A| = 3, |S| = 2, A∩S = {(0,0)} -> 1, A∩P = {(0,0), (1,2)} -> 2
    # sentence 2: |A| = 2, |S| = 1, A∩S = {(0,1)} -> 1, A∩P = {(0,1), (1,0)} -> 2
    # corpus:     |A| = 5, |S| = 3, |A∩S| = 2, |A∩P| = 4
    # precision = 4/5, recall = 2/3, AER = 1 - (2 + 4) / (5 + 3) = 0.25
    # (the mean of sentence AERs would be (1 - 3/5 + 1 - 3/3) / 2 = 0.2: not what is asked)
    scores = alignment_error_rate(hyp, sure, possible)
    assert scores["precision"] == pytest.approx(0.8)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["aer"] == pytest.approx(0.25)
    assert (scores["hyp"], scores["sure"], scores["possible"]) == (5, 3, 5)
    assert (scores["hyp_and_sure"], scores["hyp_and_possible"]) == (2, 4)


def test_aer_possible_links_cost_nothing_and_sure_is_always_possible() -> None:
    sure = [{(0, 0)}]
    possible = [{(0, 0), (0, 1), (1, 1)}]
    # A = P: |A| = 3, |S| = 1, |A∩S| = 1, |A∩P| = 3 -> AER = 1 - (1 + 3) / (3 + 1) = 0,
    # precision = 3/3, recall = 1/1
    scores = alignment_error_rate(possible, sure, possible)
    assert (scores["aer"], scores["precision"], scores["recall"]) == (0.0, 1.0, 1.0)
    # A = {(0,0), (1,0)}, P given without its sure link: P is read as {(1,0)} ∪ S.
    # |A| = 2, |S| = 1, |A∩S| = 1, |A∩P| = 2 -> AER = 1 - 3/3 = 0
    scores = alignment_error_rate([{(0, 0), (1, 0)}], sure, [{(1, 0)}])
    assert scores["aer"] == 0.0 and scores["possible"] == 2
    # One wrong link and no possible list (P = S): |A| = 2, |S| = 1, |A∩S| = |A∩P| = 1
    # -> AER = 1 - 2/3, precision 1/2, recall 1
    scores = alignment_error_rate([{(0, 0), (1, 1)}], sure)
    assert scores["aer"] == pytest.approx(1 / 3)
    assert scores["precision"] == 0.5 and scores["recall"] == 1.0


def test_aer_edge_cases() -> None:
    # nothing hypothesised: AER = 1 - 0/|S| = 1, recall 0, precision vacuously 1
    scores = alignment_error_rate([set()], [{(0, 0)}])
    assert (scores["aer"], scores["precision"], scores["recall"]) == (1.0, 1.0, 0.0)
    assert alignment_error_rate([], [], [])["aer"] == 0.0
    with pytest.raises(ValueError, match="one of each per sentence"):
        alignment_error_rate([set()], [set(), set()])


def hand_weights() -> Tensor:
    """4 rows (3 target pieces + EOS) x 5 columns (4 source pieces + 1 padding column)."""
    return torch.tensor(
        [
            [0.1, 0.2, 0.3, 0.4, 0.0],
            [0.5, 0.1, 0.1, 0.3, 0.0],
            [0.0, 0.6, 0.2, 0.0, 0.2],
            [1.0, 0.0, 0.0, 0.0, 0.0],  # EOS row: dropped
        ],
        dtype=torch.float64,
    )


def test_word_attention_sums_source_pieces_and_averages_target_pieces() -> None:
    src_ids = [0, 1, 1, -1]  # word 0 = column 0, word 1 = columns 1+2, column 3 a space
    tgt_ids = [0, 0, 1]  # word 0 = rows 0 and 1, word 1 = row 2
    # columns: row0 -> [0.1, 0.2+0.3] = [0.1, 0.5], row1 -> [0.5, 0.2], row2 -> [0.0, 0.8]
    # rows: word 0 = mean(row0, row1) = [0.3, 0.35], word 1 = row2 = [0.0, 0.8]
    expected = torch.tensor([[0.3, 0.35], [0.0, 0.8]], dtype=torch.float64)
    pooled = word_attention(hand_weights(), src_ids, tgt_ids)
    torch.testing.assert_close(pooled, expected)
    # numpy in, leading dims (e.g. layers x heads) kept
    stacked = np.stack([hand_weights().numpy(), 2 * hand_weights().numpy()])  # (2, T, S)
    torch.testing.assert_close(
        word_attention(stacked, src_ids, tgt_ids), torch.stack([expected, 2 * expected])
    )
    assert word_attention(hand_weights(), [], tgt_ids).shape == (2, 0)
    with pytest.raises(ValueError, match="6 word ids for only 5"):
        word_attention(hand_weights(), [0] * 6, tgt_ids)


def test_argmax_and_threshold_alignments() -> None:
    pooled = word_attention(hand_weights(), [0, 1, 1, -1], [0, 0, 1])  # [[.3, .35], [0, .8]]
    assert argmax_alignment(pooled) == {(1, 0), (1, 1)}  # (source word, target word)
    assert argmax_alignment(pooled, src_first=False) == {(0, 1), (1, 1)}
    assert threshold_alignment(pooled, 0.32) == {(1, 0), (1, 1)}
    assert threshold_alignment(pooled, 0.25) == {(0, 0), (1, 0), (1, 1)}
    assert threshold_alignment(pooled, 0.25, src_first=False) == {(0, 0), (0, 1), (1, 1)}
    assert threshold_alignment(torch.tensor([[0.5, 0.25]]), 0.25) == {(0, 0)}  # strictly greater
    # ties go to the first source word; a row without mass gets no link
    assert argmax_alignment(np.array([[0.0, 0.0], [0.5, 0.5]])) == {(0, 1)}
    assert argmax_alignment(torch.zeros(3, 0)) == set()
    with pytest.raises(ValueError, match="T_words, S_words"):
        argmax_alignment(torch.zeros(2, 2, 2))


# ------------------------------------------------------------
# Symmetrization of two alignment directions (Koehn et al. 2003; Moses symal), on hand-worked
# cases. Links are (source word, target word); `forward` has one link per target word, as a
# source -> target attention model gives, `reverse` one per source word.


def test_transpose_swaps_each_link() -> None:
    assert transpose({(0, 1), (2, 0)}) == {(1, 0), (0, 2)}


def test_grow_diag_adds_a_diagonal_neighbour() -> None:
    # 3 x 3. forward: t0->s0, t1->s1, t2->s2; reverse: s0->t0, s1->t2, s2->t2.
    # intersection {(0,0), (2,2)}; union adds (1,1) and (1,2).
    forward = {(0, 0), (1, 1), (2, 2)}
    reverse = {(0, 0), (1, 2), (2, 2)}
    # (1,1) is the diagonal neighbour of (0,0) and both its words are unaligned: grow-diag adds
    # it; (1,2) then joins two aligned words and stays out (also in the final steps)
    assert symmetrize(forward, reverse, "intersect") == {(0, 0), (2, 2)}
    assert symmetrize(forward, reverse, "union") == {(0, 0), (1, 1), (1, 2), (2, 2)}
    for heuristic in ("grow-diag", "grow-diag-final", "grow-diag-final-and"):
        assert symmetrize(forward, reverse, heuristic) == {(0, 0), (1, 1), (2, 2)}, heuristic


def test_final_and_adds_only_links_between_two_unaligned_words() -> None:
    # 4 x 4. forward: t0->s0, t1->s1, t2->s3, t3->s3; reverse: s0->t0, s1->t1, s2->t3, s3->t0.
    forward = {(0, 0), (1, 1), (3, 2), (3, 3)}
    reverse = {(0, 0), (1, 1), (2, 3), (3, 0)}
    # grow-diag: no link of the union neighbours (0,0) or (1,1), so it stays the intersection
    assert symmetrize(forward, reverse, "grow-diag") == {(0, 0), (1, 1)}
    # final-and, forward-only links first, sorted by (target, source): (3,2) joins unaligned
    # s3 and t2 -> added; (3,3): s3 is now aligned -> not added. Then reverse-only: (3,0) joins
    # aligned s3 and t0 -> no; (2,3) joins unaligned s2 and t3 -> added.
    assert symmetrize(forward, reverse, "grow-diag-final-and") == {(0, 0), (1, 1), (3, 2), (2, 3)}
    # final (either word unaligned) also takes (3,3), whose t3 was still unaligned
    assert symmetrize(forward, reverse, "grow-diag-final") == {
        (0, 0),
        (1, 1),
        (3, 2),
        (3, 3),
        (2, 3),
    }


def test_grow_diag_follows_a_chain_and_order_decides() -> None:
    # only (0,0) agrees; the union holds the diagonal chain and (0,3), which no grown link
    # neighbours: the chain grows link by link within one call, (0,3) stays out
    chain = {(0, 0), (1, 1), (2, 2), (3, 3)}
    assert symmetrize(chain, {(0, 0), (0, 3)}, "grow-diag") == chain
    # with (3,1) instead: scanning (2,2) [as (target 2, source 2)], its diagonal neighbour
    # (target 1, source 3) comes before (target 3, source 3) and source 3 is still unaligned,
    # so (3,1) is added; then (3,3) still covers the unaligned target 3 and is added too
    assert symmetrize(chain, {(0, 0), (3, 1)}, "grow-diag") == chain | {(3, 1)}
    # points inserted before the one being scanned are scanned in the next pass
    assert symmetrize({(3, 3), (2, 2), (1, 1)}, {(3, 3)}, "grow-diag") == {(1, 1), (2, 2), (3, 3)}


def test_every_heuristic_lies_between_intersection_and_union() -> None:
    forward = {(0, 1), (1, 0), (2, 2), (2, 3)}
    reverse = {(0, 0), (1, 0), (2, 3), (3, 2)}
    for heuristic in SYMMETRIZATIONS:
        links = symmetrize(forward, reverse, heuristic)
        assert forward & reverse <= links <= forward | reverse, heuristic
    with pytest.raises(ValueError, match="grow-diag-final-and"):
        symmetrize(forward, reverse, "grow")
