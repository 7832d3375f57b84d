"""Word alignments from attention: piece -> word pooling, hard links, AER, attention statistics,
and the AER of a model. The gold links are read by alignment_gold.py (Pharaoh and NAACL files).

Link convention. An alignment of one sentence pair is a set of (i, j) index pairs, 0-indexed.
Gold files fix their own order: in the WPT 2003 English-French set (../shared/data/alignments/
wpt03_enfr) i is the English word and j the French word, whichever side a model translates
from. Everything built from a model here produces **(source word, target word)** pairs by default
(`src_first=True`); pass `src_first=False` to get (target, source) instead, e.g. to score a
French -> English model against the WPT files. The toy tasks of attnseq/data/generated.py give
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

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from attnseq.analysis.alignment_gold import Alignment, Link
from attnseq.data.batching import Example, collate
from attnseq.models.seq2seq import Seq2Seq

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
    entropy = -torch.special.xlogy(w, w).sum(dim=-1)  # (..., T); xlogy(0, 0) = 0
    top = w.max(dim=-1).values  # (..., T)
    return {
        "entropy": float(entropy[real_rows].mean()),
        "argmax_weight": float(top[real_rows].mean()),
    }


# ----------------------------------------------------------------------- model metrics
def _check_gold(
    links: Iterable[Link], n_src: int, n_tgt: int, index: int, src_first: bool, name: str
) -> None:
    for link in links:
        s, t = link if src_first else link[::-1]
        if not (0 <= s < n_src and 0 <= t < n_tgt):
            raise ValueError(
                f"{name} link {link} of example {index} is outside its {n_src} source x "
                f"{n_tgt} target words: do the pieces split into the gold's words, and is "
                f"src_first={src_first} the gold's order?"
            )


@torch.no_grad()
def model_alignment_metrics(
    model: Seq2Seq,
    examples: Sequence[Example],
    src_pieces: Sequence[Sequence[str]],
    tgt_pieces: Sequence[Sequence[str]],
    gold_sure: Sequence[Iterable[Link]],
    gold_possible: Sequence[Iterable[Link]] | None = None,
    *,
    src_kind: str,
    tgt_kind: str,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    src_first: bool = True,
    per_map_scores: Sequence[str] = ("aer",),
) -> dict[str, float]:
    """AER of a model's cross-attention, teacher-forced on (source, reference target) pairs.

    Each example is run through `model(src, src_lengths, tgt_in, need_weights=True)`, its
    attention pooled to words (`word_attention`) and turned into one link per target word
    (`argmax_alignment`), then scored against the gold (`alignment_error_rate`).

    Transformers return one attention map per decoder layer and head. Each head is scored
    (``aer/layer{L}/head{H}``, 1-based) and so is the average of each layer's heads
    (``aer/layer{L}/mean``). The overall ``aer``/``precision``/``recall`` are those of the **last
    layer's head average**: a choice fixed in advance, because picking the best layer or head by
    its AER would tune on the gold links being reported (the per-layer numbers are there to look
    at; Garg et al. 2019 find the penultimate layer aligns best in their 6-layer models).

    Args:
        model: any `Seq2Seq`; put in eval mode for the pass (its mode is restored after).
        examples: (source ids, target ids) without BOS/EOS (`attnseq.data.batching.encode_pairs`).
        src_pieces, tgt_pieces: the pieces of each text (`Tokenizer.pieces`), one per id.
        gold_sure, gold_possible: gold links of each example (possible None: all sure).
        src_kind, tgt_kind: piece kinds for `word_ids` ("word", "char", "sentencepiece").
        device: where to run the model.
        batch_size: examples per forward pass.
        src_first: the gold links are (source word, target word) if True, else (target,
            source); the hypothesis links are produced in the same order.
        per_map_scores: which of "aer", "precision", "recall" to report per layer/head
            (``{score}/layer{L}/head{H}`` and ``{score}/layer{L}/mean``).

    Returns:
        {"aer", "precision", "recall"} and, for transformers, the per-layer/head scores: all
        of the first score, then of the next (by default the AERs only).

    Raises:
        ValueError: mismatched lengths, a model without attention, or gold links outside the
            words the pieces make up.
    """
    n = len(examples)
    # sets once: the links are read twice (checked here, scored at the end)
    gold_sure = [set(links) for links in gold_sure]
    if gold_possible is not None:
        gold_possible = [set(links) for links in gold_possible]
    lists: Mapping[str, Sequence[object]] = {
        "src_pieces": src_pieces,
        "tgt_pieces": tgt_pieces,
        "gold_sure": gold_sure,
    }
    if gold_possible is not None:
        lists = {**lists, "gold_possible": gold_possible}
    for name, values in lists.items():
        if len(values) != n:
            raise ValueError(f"{n} examples but {len(values)} {name}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    unknown = [name for name in per_map_scores if name not in ALIGNMENT_SCORES]
    if unknown:
        raise ValueError(f"unknown scores {unknown}; valid: {', '.join(ALIGNMENT_SCORES)}")
    src_words: list[list[int]] = []
    tgt_words: list[list[int]] = []
    for i, ((src_ids, tgt_ids), src_p, tgt_p) in enumerate(
        zip(examples, src_pieces, tgt_pieces, strict=True)
    ):
        if len(src_p) != len(src_ids) or len(tgt_p) != len(tgt_ids):
            raise ValueError(
                f"example {i}: {len(src_ids)}/{len(tgt_ids)} source/target ids but "
                f"{len(src_p)}/{len(tgt_p)} pieces"
            )
        src_words.append(word_ids(src_p, src_kind))
        tgt_words.append(word_ids(tgt_p, tgt_kind))
        n_src, n_tgt = max(src_words[-1], default=-1) + 1, max(tgt_words[-1], default=-1) + 1
        _check_gold(gold_sure[i], n_src, n_tgt, i, src_first, "sure")
        if gold_possible is not None:
            _check_gold(gold_possible[i], n_src, n_tgt, i, src_first, "possible")

    # hypothesis links per scored attention map ("" for an RNN's single map), in example order
    hyps: dict[str, list[Alignment]] = {}
    last_layer = 0
    was_training = model.training
    model.eval()
    try:
        # length-sorted batches pad less; results are stored by example index
        order = sorted(range(n), key=lambda i: (len(examples[i][0]), len(examples[i][1])))
        for start in range(0, n, batch_size):
            chunk = order[start : start + batch_size]
            batch = collate(
                [examples[i] for i in chunk],
                chunk,
                pad_id=model.pad_id,
                bos_id=model.bos_id,
                eos_id=model.eos_id,
            ).to(device)
            # Copy models need the source in the extended vocabulary; it only places the copy
            # mass on output ids, never the attention, so the in-vocabulary ids serve.
            copy = getattr(model, "copy", False)
            copy_inputs = {"src_ext": batch.src, "n_oov": 0} if copy else {}
            output = model(
                batch.src, batch.src_lengths, batch.tgt_in, need_weights=True, **copy_inputs
            )
            if output.attention is None:
                raise ValueError(f"{type(model).__name__} returns no attention weights")
            weights = output.attention.float().cpu()  # (B, T, S) or (B, L, H, T, S)
            if weights.dim() not in (3, 5):
                raise ValueError(f"unexpected attention shape {tuple(weights.shape)}")
            for b, i in enumerate(chunk):
                pooled = word_attention(weights[b], src_words[i], tgt_words[i])
                if weights.dim() == 3:  # (Tw, Sw)
                    hyps.setdefault("", [set() for _ in range(n)])[i] = argmax_alignment(
                        pooled, src_first=src_first
                    )
                    continue
                L, H = pooled.shape[:2]  # pooled: (L, H, Tw, Sw)
                last_layer = L
                layer_means = pooled.mean(dim=1)  # (L, Tw, Sw); pooling is linear
                for layer in range(L):
                    for head in range(H):
                        key = f"layer{layer + 1}/head{head + 1}"
                        hyps.setdefault(key, [set() for _ in range(n)])[i] = argmax_alignment(
                            pooled[layer, head], src_first=src_first
                        )
                    key = f"layer{layer + 1}/mean"
                    hyps.setdefault(key, [set() for _ in range(n)])[i] = argmax_alignment(
                        layer_means[layer], src_first=src_first
                    )
    finally:
        model.train(was_training)

    if not hyps:  # no examples: nothing hypothesised, nothing to find
        hyps[""] = []
    metrics: dict[str, float] = {}
    per_map: dict[str, dict[str, float]] = {name: {} for name in per_map_scores}
    for key, links in hyps.items():
        scores = alignment_error_rate(links, gold_sure, gold_possible)
        if key:
            for name in per_map_scores:
                per_map[name][f"{name}/{key}"] = scores[name]
        if key == "" or key == f"layer{last_layer}/mean":
            metrics.update({name: scores[name] for name in ALIGNMENT_SCORES})
    # the overall numbers first, then per layer/head in layer order (TensorBoard lists by name)
    for values in per_map.values():
        metrics.update(values)
    return metrics


def alignment_table(metrics: Mapping[str, float]) -> str:
    """A text table of `model_alignment_metrics(..., per_map_scores=ALIGNMENT_SCORES)`: one
    line per layer/head (and each layer's head average), then the overall scores."""
    header = f"{'attention':<22}{'AER':>8}{'precision':>11}{'recall':>8}"
    lines = [header, "-" * len(header)]
    maps = [key[len("aer/") :] for key in metrics if key.startswith("aer/")]
    for key in maps:
        layer, head = key.split("/")
        label = f"{layer[:5]} {layer[5:]}, " + (
            "head mean" if head == "mean" else f"head {head[4:]}"
        )
        values = [metrics.get(f"{name}/{key}", float("nan")) for name in ALIGNMENT_SCORES]
        lines.append(f"{label:<22}{values[0]:>8.4f}{values[1]:>11.4f}{values[2]:>8.4f}")
    overall = "overall" if not maps else f"overall (layer {maps[-1].split('/')[0][5:]} mean)"
    values = [metrics[name] for name in ALIGNMENT_SCORES]
    lines.append(f"{overall:<22}{values[0]:>8.4f}{values[1]:>11.4f}{values[2]:>8.4f}")
    return "\n".join(lines)
