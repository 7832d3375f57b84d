"""Symmetrization of two alignment directions (Koehn et al. 2003; Moses symal), on hand-worked
cases. Links are (source word, target word); `forward` has one link per target word, as a
source -> target attention model gives, `reverse` one per source word."""

import pytest

from attnseq.analysis.alignment import SYMMETRIZATIONS, symmetrize, transpose


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
