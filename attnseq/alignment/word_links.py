"""Word links from attention: piece weights pooled to words, argmax or threshold links, the
alignment error rate and the symmetrization of two directions.

Shapes: T target pieces (rows: row t predicts target piece t, the last row EOS), S source pieces
(columns), L layers, H heads, B batch.
"""

import bisect
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from attnseq.data.word_alignments import Alignment, Link
from attnseq.errors import UserError

WeightsLike = Tensor | np.ndarray

ALIGNMENT_SCORES: tuple[str, ...] = ("aer", "precision", "recall")


# ----------------------------------------------------------------------- pieces -> words
def check_layer_and_head(
    layer: int | None,
    head: int | None,
    layers: int,
    heads: int,
    single: str = "",
    names: tuple[str, str] = ("layer", "head"),
) -> None:
    """UserError unless `layer` and `head` (the attention map's layer and head, counted from
    1; None: not given) are within the model's 1..layers and 1..heads. A model whose attention
    is one map (an RNN, a hierarchical model's segments) has layers = heads = 1, and `single`
    says so in the message (e.g. "an RNN's attention is one map"). `names`: what the message
    calls the two (by default the arguments; a command passes its options)."""
    note = f" ({single})" if single else ""
    for option, value, count in ((names[0], layer, layers), (names[1], head, heads)):
        if value is not None and not 1 <= value <= count:
            raise UserError(f"{option} must be in 1..{count} for this model{note}, got {value}")


def _pooling(
    ids: Sequence[int], n_positions: int, *, average: bool, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """(n_words, n_positions) matrix M with M[w, p] = 1 (or 1/|pieces of w|) if piece p is in w.

    Positions past len(ids) (EOS row, padding) and pieces with id -1 belong to no word.
    """
    if len(ids) > n_positions:
        raise ValueError(f"{len(ids)} word ids for only {n_positions} attention positions")
    index = torch.tensor(list(ids), dtype=torch.long)
    if (index < -1).any():
        raise ValueError("word ids must be >= 0, or -1 for pieces outside any word")
    n_words = int(index.max()) + 1 if len(ids) else 0
    matrix = torch.zeros(n_words, n_positions, dtype=dtype)
    positions = torch.nonzero(index >= 0).squeeze(1)
    matrix[index[positions], positions] = 1.0
    if average:
        # a word id that no piece carries leaves a zero row (clamp avoids 0/0)
        matrix = matrix / matrix.sum(dim=1, keepdim=True).clamp_min(1.0)
    return matrix.to(device)


def word_attention(
    weights: WeightsLike, src_word_ids: Sequence[int], tgt_word_ids: Sequence[int]
) -> Tensor:
    """Pool piece-level attention into word-level attention, P_a the target pieces of word a
    and Q_b the source pieces of word b:

        W[..., a, b] = 1/|P_a| * sum_{t in P_a} sum_{s in Q_b} w[..., t, s]

    Source pieces sum (the mass a word receives, however many pieces it has), target pieces
    average (a word's row stays a distribution over source words, up to the mass on dropped
    columns).

    Args:
        weights: (..., T, S) attention of one example (any leading dims, e.g. (L, H, T, S));
            it may be the padded slice of a batch.
        src_word_ids: word index of each source piece (`word_ids`); len <= S. Columns past its
            length (padding) and columns with id -1 (e.g. spaces) are dropped.
        tgt_word_ids: word index of each target piece; len <= T. Rows past its length (the EOS
            row when it has one id per target piece, padding) and rows with id -1 are dropped.

    Returns:
        (..., T_words, S_words) float tensor on the weights' device, T_words/S_words = largest
        word id + 1 (0 when there is none).
    """
    w = torch.as_tensor(weights)
    if w.dim() < 2:
        raise ValueError(f"attention weights need at least 2 dims (T, S), got shape {w.shape}")
    if not w.is_floating_point() or w.dtype in (torch.float16, torch.bfloat16):
        w = w.float()  # half-precision sums over many pieces lose digits
    T, S = w.shape[-2:]
    rows = _pooling(tgt_word_ids, T, average=True, dtype=w.dtype, device=w.device)  # (Tw, T)
    cols = _pooling(src_word_ids, S, average=False, dtype=w.dtype, device=w.device)  # (Sw, S)
    return rows @ w @ cols.T  # (..., Tw, T) @ (..., T, S) @ (S, Sw) -> (..., Tw, Sw)


# ---------------------------------------------------------------------------- hard links
def _as_matrix(word_weights: WeightsLike) -> Tensor:
    w = torch.as_tensor(word_weights)
    if w.dim() != 2:
        raise ValueError(f"word attention must be (T_words, S_words), got shape {tuple(w.shape)}")
    return w.detach().cpu()


def argmax_alignment(word_weights: WeightsLike, *, src_first: bool = True) -> Alignment:
    """One link per target word: the source word with the largest weight in its row (as in
    Bahdanau et al. 2015's alignment figures and the attention AER of Garg et al. 2019).

    Args:
        word_weights: (T_words, S_words), e.g. from `word_attention`.
        src_first: links as (source word, target word) if True (the default), else
            (target word, source word). For the WPT en-fr gold (i = English, j = French), a model
            translating English -> French needs True, French -> English False.

    Returns:
        The set of links. Ties go to the first (leftmost) source word; a row without any positive
        weight (all its mass fell on dropped columns such as spaces) gets no link.
    """
    w = _as_matrix(word_weights)
    if w.size(1) == 0:
        return set()
    best = w.argmax(dim=1)  # (T_words,) first maximum on ties
    top = w.gather(1, best.unsqueeze(1)).squeeze(1)  # (T_words,)
    return {
        (s, t) if src_first else (t, s)
        for t, (s, value) in enumerate(zip(best.tolist(), top.tolist(), strict=True))
        if value > 0
    }


def threshold_alignment(
    word_weights: WeightsLike, threshold: float, *, src_first: bool = True
) -> Alignment:
    """Every (source word, target word) whose weight is strictly greater than `threshold`.

    Unlike `argmax_alignment` a target word can get several links or none, which suits
    one-to-many translations. `src_first` as in `argmax_alignment`.
    """
    w = _as_matrix(word_weights)
    return {(s, t) if src_first else (t, s) for t, s in torch.nonzero(w > threshold).tolist()}


# --------------------------------------------------------------------------------- AER
def alignment_error_rate(
    hyp: Sequence[Iterable[Link]],
    sure: Sequence[Iterable[Link]],
    possible: Sequence[Iterable[Link]] | None = None,
) -> dict[str, float]:
    """Corpus-level AER, precision and recall (Och & Ney 2003, "A Systematic Comparison of
    Various Statistical Alignment Models", Computational Linguistics 29(1), section 5).

    Counts are summed over all sentences before dividing (not a mean of per-sentence ratios):

        precision = |A ∩ P| / |A|,  recall = |A ∩ S| / |S|,
        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

    Args:
        hyp: hypothesis links A of each sentence.
        sure: sure gold links S of each sentence.
        possible: possible gold links P of each sentence; None means P = S. Each P is taken as
            P ∪ S, so S ⊆ P holds whatever the input.

    Returns:
        {"aer", "precision", "recall"} plus the corpus counts "hyp", "sure", "possible",
        "hyp_and_sure", "hyp_and_possible". A ratio with nothing to count is vacuous: precision
        1.0 without hypothesis links, recall 1.0 without sure links, AER 0.0 without either.

    Raises:
        ValueError: the lists have different lengths.
    """
    if possible is None:
        possible = sure
    if not len(hyp) == len(sure) == len(possible):
        raise ValueError(
            f"{len(hyp)} hypothesis, {len(sure)} sure and {len(possible)} possible alignments: "
            "need one of each per sentence"
        )
    n_hyp = n_sure = n_possible = hyp_sure = hyp_possible = 0
    for a_links, s_links, p_links in zip(hyp, sure, possible, strict=True):
        a, s = set(a_links), set(s_links)
        p = set(p_links) | s
        n_hyp += len(a)
        n_sure += len(s)
        n_possible += len(p)
        hyp_sure += len(a & s)
        hyp_possible += len(a & p)
    return {
        "aer": 1.0 - (hyp_sure + hyp_possible) / (n_hyp + n_sure) if n_hyp + n_sure else 0.0,
        "precision": hyp_possible / n_hyp if n_hyp else 1.0,
        "recall": hyp_sure / n_sure if n_sure else 1.0,
        "hyp": float(n_hyp),
        "sure": float(n_sure),
        "possible": float(n_possible),
        "hyp_and_sure": float(hyp_sure),
        "hyp_and_possible": float(hyp_possible),
    }


# ----------------------------------------------------------------------------- symmetrization
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
    """Combine the two directions' (source word, target word) links of one sentence pair by
    a heuristic of Koehn, Och & Marcu (2003, "Statistical Phrase-Based Translation", NAACL,
    section 3.3), as the Moses toolkit's symal implements them (symal.cpp, `printgrow`):

        intersect            F ∩ R
        union                F ∪ R
        grow-diag            from F ∩ R, add links of F ∪ R that neighbour one already there
                             (also diagonally) and cover an unaligned word, until none is left
        grow-diag-final      grow-diag, then each link of F ∪ R covering an unaligned word
        grow-diag-final-and  grow-diag, then each link of F ∪ R whose two words are unaligned

    Args:
        forward: links F of the source -> target model.
        reverse: links R of the target -> source model, transposed to (source, target).
        heuristic: one of `SYMMETRIZATIONS`.

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
    """The growing alignment of symal's `printgrow`: its (target, source) points, kept sorted
    and visited in that order (symal's std::set), and the target and source words they cover;
    symal's order is kept, since every added link covers its words for those after it."""

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
