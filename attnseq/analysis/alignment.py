"""Word alignments from attention: piece -> word pooling, hard links, AER and attention
statistics. The gold links are read by alignment_gold.py (Pharaoh and NAACL files); the AER of a
model's own attention is model_alignment.py's, its split-wide diagnostics (end-of-source mass,
entropy per head) attention_diagnostics.py's.

Link convention. An alignment of one sentence pair is a set of (i, j) index pairs, 0-indexed.
Gold files fix their own order: in the WPT 2003 English-French set i is the English word and j
the French word, whichever side a model translates from. Everything built from a model here
produces **(source word, target word)** pairs by default (`src_first=True`); pass
`src_first=False` to get (target, source) instead, e.g. to score a French -> English model
against the WPT files. The toy tasks of attnseq/data/generated.py give
(source, target) links.

From attention to words. A model attends over pieces (characters, words, sentencepiece pieces),
the gold links words. `word_ids` maps each piece to its word, and `word_attention` pools the
(T, S) piece weights into (T_words, S_words):

    W[a, b] = 1/|P_a| * sum_{t in P_a} sum_{s in Q_b} w[t, s]

with P_a the target pieces of target word a and Q_b the source pieces of source word b. Summing
over a source word's pieces gives the probability mass the word receives (a word split into many
pieces is not penalised); averaging over a target word's pieces keeps each row a distribution, in
which every piece of the word has an equal say. Hard links then come from the argmax of each row
(`argmax_alignment`: one link per target word, as in Bahdanau et al. 2015's alignment figures and
the attention-AER evaluation of Garg et al. 2019, "Jointly Learning to Align and Translate with
Transformer Models", EMNLP) or from a threshold (`threshold_alignment`).

Alignment error rate (Och & Ney 2003, "A Systematic Comparison of Various Statistical Alignment
Models", Computational Linguistics 29(1), section 5), with A the hypothesis links, S the sure and
P the possible gold links (S ⊆ P), each summed over the whole corpus:

    precision = |A ∩ P| / |A|,   recall = |A ∩ S| / |S|,
    AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Shapes: T target pieces (rows: the row t predicts target piece t, the last row EOS), S source
pieces (columns; the source has no BOS/EOS), L layers, H heads, B batch.
"""

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from attnseq.analysis.alignment_gold import Alignment, Link

WeightsLike = Tensor | np.ndarray

WORD_BOUNDARY = "\u2581"  # "▁", sentencepiece's marker of a piece that starts a word
PIECE_KINDS: tuple[str, ...] = ("word", "char", "sentencepiece")
ALIGNMENT_SCORES: tuple[str, ...] = ("aer", "precision", "recall")


# ----------------------------------------------------------------------- pieces -> words
def word_ids(pieces: Sequence[str], kind: str) -> list[int]:
    """The word index of every piece (-1 for pieces that belong to no word).

    Args:
        pieces: the tokenizer's pieces of one text (`Tokenizer.pieces(text)`, no BOS/EOS).
        kind: "word" (one piece per word), "char" (whitespace characters separate words and
            belong to none: -1), or "sentencepiece" (a piece starting with "▁" starts a new word;
            a first piece without it starts word 0 too).

    Returns:
        len(pieces) indices; the words are numbered 0, 1, ... in order, as in the gold files.
    """
    if kind == "word":
        return list(range(len(pieces)))
    if kind == "char":
        ids: list[int] = []
        word = -1
        in_word = False
        for piece in pieces:
            if piece.isspace():
                ids.append(-1)
                in_word = False
            else:
                if not in_word:
                    word += 1
                    in_word = True
                ids.append(word)
        return ids
    if kind == "sentencepiece":
        ids = []
        word = -1
        for piece in pieces:
            if piece.startswith(WORD_BOUNDARY) or word < 0:
                word += 1
            ids.append(word)
        return ids
    raise ValueError(f"unknown piece kind {kind!r}; valid kinds: {', '.join(PIECE_KINDS)}")


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
    """Pool piece-level attention into word-level attention.

    W[..., a, b] = mean over the target pieces t of word a of (sum over the source pieces s of
    word b of w[..., t, s]): source pieces sum (the mass a word receives), target pieces average
    (a word's row stays a distribution over source words, up to the mass on dropped columns).

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
    """One link per target word: the source word with the largest weight in its row.

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
    """Corpus-level AER, precision and recall (Och & Ney 2003, section 5).

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


# -------------------------------------------------------------------------- statistics
def row_entropy(weights: Tensor) -> Tensor:
    """H(w_t) = -sum_s w[..., t, s] ln w[..., t, s] of every row, in nats: (..., T, S) ->
    (..., T); 0 for a one-hot row, ln S for a uniform one (xlogy(0, 0) = 0: zero weights,
    e.g. at padding, add nothing)."""
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def attention_statistics(weights: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    """Sharpness of attention rows, for TensorBoard.

    entropy: mean over real rows of H(w_t) = -sum_s w[t, s] ln w[t, s] (nats; 0 for a one-hot
        row, ln S for a uniform row over S positions).
    argmax_weight: mean over real rows of max_s w[t, s] (1 for one-hot, 1/S for uniform).

    Args:
        weights: (..., T, S) attention, e.g. (B, T, S) or (B, L, H, T, S); pass
            weights[:, layer, head] for one head's numbers.
        mask: bool, True at real (target row, source column) positions, broadcastable to
            `weights`, e.g. ``batch.tgt_mask[:, :, None] & batch.src_mask[:, None, :]`` (B, T, S),
            which is also accepted for (B, L, H, T, S) weights. Masked positions are ignored and a
            row with no real position is left out of the means. None: every position is real.

    Returns:
        {"entropy", "argmax_weight"}; both 0.0 when there is no real row.
    """
    w = weights.detach().double()
    if mask is None:
        mask = torch.ones_like(w, dtype=torch.bool)
    else:
        mask = mask.to(device=w.device, dtype=torch.bool)
        if mask.dim() == 3 and w.dim() == 5:
            mask = mask[:, None, None]  # (B, T, S) -> (B, 1, 1, T, S)
        mask = mask.broadcast_to(w.shape)
    w = w.masked_fill(~mask, 0.0)
    real_rows = mask.any(dim=-1)  # (..., T)
    if not real_rows.any():
        return {"entropy": 0.0, "argmax_weight": 0.0}
    entropy = row_entropy(w)  # (..., T)
    top = w.max(dim=-1).values  # (..., T)
    return {
        "entropy": float(entropy[real_rows].mean()),
        "argmax_weight": float(top[real_rows].mean()),
    }
