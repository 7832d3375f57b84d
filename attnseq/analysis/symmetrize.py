"""Symmetrization of two word alignments of the same sentence pairs, one from each direction:
intersection, union and the grow-diag family of Koehn, Och & Marcu (2003), "Statistical
Phrase-Based Translation", NAACL, section 3.3, as the Moses toolkit's `symal` implements them
(moses-smt/mosesdecoder, symal/symal.cpp, `printgrow`).

Both alignments are sets of (source word, target word) links, 0-based. `forward` comes from the
source -> target direction (an attention model gives one link per target word), `reverse` from
the target -> source direction with its links already transposed to (source, target)
(`transpose`).

    intersect   A = F ∩ R                      high precision
    union       A = F ∪ R                      high recall
    grow-diag   start from F ∩ R; repeatedly add a link of F ∪ R that neighbours a link of A
                (horizontally, vertically or diagonally) and covers a word A leaves
                unaligned, until nothing changes
    grow-diag-final      grow-diag, then add each link of F ∪ R that covers a word A leaves
                unaligned (either word)
    grow-diag-final-and  grow-diag, then add each link of F ∪ R whose source word AND target word
                are both still unaligned

Order matters, since every added link covers its words for the links after it; symal's order is
kept. Links are visited sorted by (target word, source word) (symal's std::set of
(target, source) points), the neighbours of a link in symal's order: (-1, 0), (0, -1), (1, 0),
(0, 1), then the diagonals (-1, -1), (-1, 1), (1, -1), (1, 1), each as (target, source) offset.
A link that the growing pass adds after the one being scanned is scanned in the same pass (an
insertion into an ordered set behind the iterator). The final step first visits the links found
only by `forward` (symal's "inverse" alignment, one link per target word), then those found only
by `reverse`.
"""

import bisect
from collections.abc import Iterable

from attnseq.analysis.alignment_gold import Alignment, Link

SYMMETRIZATIONS: tuple[str, ...] = (
    "intersect",
    "union",
    "grow-diag",
    "grow-diag-final",
    "grow-diag-final-and",
)

# (target offset, source offset) of a link's neighbours, in symal's order: the four
# horizontal/vertical ones, then the four diagonal ones
_NEIGHBOURS: tuple[Link, ...] = ((-1, 0), (0, -1), (1, 0), (0, 1))
_DIAGONALS: tuple[Link, ...] = ((-1, -1), (-1, 1), (1, -1), (1, 1))


def transpose(links: Iterable[Link]) -> Alignment:
    """(i, j) -> (j, i): a reverse model's (its source = our target, its target = our source)
    links as (source, target)."""
    return {(j, i) for i, j in links}


def symmetrize(forward: Iterable[Link], reverse: Iterable[Link], heuristic: str) -> Alignment:
    """Combine the two directions' (source word, target word) links of one sentence pair.

    Args:
        forward: links of the source -> target model.
        reverse: links of the target -> source model, transposed to (source, target).
        heuristic: one of `SYMMETRIZATIONS` (the module docstring defines each).

    Returns:
        The symmetrized links as (source word, target word).

    Raises:
        ValueError: an unknown heuristic.
    """
    forward, reverse = set(forward), set(reverse)
    if heuristic == "intersect":
        return forward & reverse
    if heuristic == "union":
        return forward | reverse
    if heuristic not in SYMMETRIZATIONS:
        raise ValueError(
            f"unknown symmetrization {heuristic!r}; valid: {', '.join(SYMMETRIZATIONS)}"
        )
    # internally every link is (target, source), the order symal sorts and offsets its points in
    fwd, rev = transpose(forward), transpose(reverse)
    grown = _Grown(fwd & rev)
    grown.grow(fwd | rev, diagonal=True)
    if heuristic != "grow-diag":
        both = heuristic == "grow-diag-final-and"
        grown.final(sorted(fwd - rev), both_uncovered=both)
        grown.final(sorted(rev - fwd), both_uncovered=both)
    return transpose(grown.points)


class _Grown:
    """The growing alignment of symal's `printgrow`: its (target, source) points, kept sorted,
    and the target and source words they cover."""

    def __init__(self, start: Alignment) -> None:
        self.points: Alignment = set(start)
        self.order: list[Link] = sorted(start)
        self.covered_tgt = {t for t, _ in start}
        self.covered_src = {s for _, s in start}

    def add(self, point: Link) -> None:
        self.points.add(point)
        bisect.insort(self.order, point)
        self.covered_tgt.add(point[0])
        self.covered_src.add(point[1])

    def leaves_uncovered(self, point: Link) -> bool:
        """True if at least one of the point's two words is not aligned yet."""
        return point[0] not in self.covered_tgt or point[1] not in self.covered_src

    def grow(self, union: Alignment, *, diagonal: bool) -> None:
        """Add neighbours from `union` that cover an unaligned word until none is left."""
        offsets = _NEIGHBOURS + _DIAGONALS if diagonal else _NEIGHBOURS
        added = True
        while added:
            added = False
            position = 0
            while position < len(self.order):
                t, s = point = self.order[position]
                for dt, ds in offsets:
                    neighbour = (t + dt, s + ds)
                    if neighbour in union and self.leaves_uncovered(neighbour):
                        self.add(neighbour)
                        added = True
                # the next point after this one, including points just inserted behind it
                position = bisect.bisect_right(self.order, point)

    def final(self, candidates: list[Link], *, both_uncovered: bool) -> None:
        """symal's final step over `candidates` (sorted (target, source) points)."""
        for point in candidates:
            if point in self.points:
                continue
            t_free, s_free = point[0] not in self.covered_tgt, point[1] not in self.covered_src
            if (t_free and s_free) if both_uncovered else (t_free or s_free):
                self.add(point)
