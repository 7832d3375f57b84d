"""The alignment error rate of a model's own cross-attention, teacher-forced on sentence pairs
with gold word links: the AER that validation reports for generated tasks with gold links and
that `attnseq eval --alignments` reports for a gold set (gold_sets.py).

The steps: check the corpus (`AlignmentCorpus`) and map every piece to its word; run the model
over length-sorted batches, pool each attention map to words and take one argmax link per target
word, on the path `attnseq align` takes (forced_alignment.py: `forced_word_attention`,
`select_map`; the "attention" method); score every map against the gold with the corpus-level
AER of Och & Ney (2003).

Maps. An RNN returns one (T, S) map per example. A transformer returns (L, H, T, S): every head
is scored (``aer/layer{L}/head{H}``, 1-based) and so is the average of each layer's heads
(``aer/layer{L}/mean``). The overall ``aer``/``precision``/``recall`` are those of the **last
layer's head average**: a choice fixed in advance, because picking the best layer or head by its
AER would tune on the gold links being reported (the per-layer numbers are there to look at;
Garg et al. 2019 find the penultimate layer aligns best in their 6-layer models).

Shapes: B batch, T target pieces (+ the EOS row), S source pieces, L layers, H heads, Tw/Sw
target/source words.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnseq.analysis.alignment import (
    ALIGNMENT_SCORES,
    Alignment,
    Link,
    alignment_error_rate,
    argmax_alignment,
    word_ids,
)
from attnseq.analysis.forced_alignment import (
    AlignmentMethod,
    WordIds,
    forced_word_attention,
    select_map,
)
from attnseq.data.batching import Example
from attnseq.models.seq2seq import Seq2Seq


@dataclass
class AlignmentCorpus:
    """Sentence pairs encoded for one model, with their gold links.

    examples: (source ids, target ids) without BOS/EOS (`attnseq.data.batching.encode_pairs`).
    src_pieces, tgt_pieces: the pieces of each text (`Tokenizer.pieces`), one per id.
    sure, possible: gold links of each example (possible None: every link sure).
    src_kind, tgt_kind: piece kinds for `word_ids` ("word", "char", "sentencepiece").
    src_first: the gold links are (source word, target word) if True, else (target, source);
        the hypothesis links are produced in the same order.
    """

    examples: Sequence[Example]
    src_pieces: Sequence[Sequence[str]]
    tgt_pieces: Sequence[Sequence[str]]
    sure: Sequence[set[Link]]
    possible: Sequence[set[Link]] | None
    src_kind: str
    tgt_kind: str
    src_first: bool = True


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
    """`corpus_alignment_metrics` of the corpus these arguments form (`AlignmentCorpus` says
    what each is); the gold links are read into sets once, since they are checked and scored."""
    sure = [set(links) for links in gold_sure]
    possible = None if gold_possible is None else [set(links) for links in gold_possible]
    corpus = AlignmentCorpus(
        examples, src_pieces, tgt_pieces, sure, possible, src_kind, tgt_kind, src_first
    )
    return corpus_alignment_metrics(
        model, corpus, device=device, batch_size=batch_size, per_map_scores=per_map_scores
    )


@torch.no_grad()
def corpus_alignment_metrics(
    model: Seq2Seq,
    corpus: AlignmentCorpus,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    per_map_scores: Sequence[str] = ("aer",),
    shift: bool = False,
) -> dict[str, float]:
    """AER of a model's cross-attention, teacher-forced on the corpus's (source, reference
    target) pairs (the module docstring says which map gives the overall numbers).

    Args:
        model: any `Seq2Seq`; put in eval mode for the pass (its mode is restored after).
        corpus: the encoded pairs and their gold links.
        device: where to run the model.
        batch_size: examples per forward pass.
        per_map_scores: which of "aer", "precision", "recall" to report per layer/head
            (``{score}/layer{L}/head{H}`` and ``{score}/layer{L}/mean``).
        shift: read each target word from the step whose input it is (Shift-Att,
            forced_alignment.py) instead of the step that predicts it.

    Returns:
        {"aer", "precision", "recall"} and, for transformers, the per-layer/head scores: all
        of the first score, then of the next (by default the AERs only).

    Raises:
        ValueError: mismatched lengths, a model without attention, or gold links outside the
            words the pieces make up.
    """
    _check_arguments(corpus, batch_size, per_map_scores)
    words = _example_words(corpus)
    hyps, last_layer = _hypothesis_links(model, corpus, words, device, batch_size, shift)
    return _scores(hyps, corpus, last_layer, per_map_scores)


# ------------------------------------------------------------------------------- checks
def _check_arguments(
    corpus: AlignmentCorpus, batch_size: int, per_map_scores: Sequence[str]
) -> None:
    n = len(corpus.examples)
    lists: dict[str, Sequence[object]] = {
        "src_pieces": corpus.src_pieces,
        "tgt_pieces": corpus.tgt_pieces,
        "gold_sure": corpus.sure,
    }
    if corpus.possible is not None:
        lists["gold_possible"] = corpus.possible
    for name, values in lists.items():
        if len(values) != n:
            raise ValueError(f"{n} examples but {len(values)} {name}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    unknown = [name for name in per_map_scores if name not in ALIGNMENT_SCORES]
    if unknown:
        raise ValueError(f"unknown scores {unknown}; valid: {', '.join(ALIGNMENT_SCORES)}")


def _example_words(corpus: AlignmentCorpus) -> list[WordIds]:
    """The word ids of every example's pieces, once its pieces match its ids and its gold
    links fall inside its words."""
    words: list[WordIds] = []
    for i, ((src_ids, tgt_ids), src_p, tgt_p) in enumerate(
        zip(corpus.examples, corpus.src_pieces, corpus.tgt_pieces, strict=True)
    ):
        if len(src_p) != len(src_ids) or len(tgt_p) != len(tgt_ids):
            raise ValueError(
                f"example {i}: {len(src_ids)}/{len(tgt_ids)} source/target ids but "
                f"{len(src_p)}/{len(tgt_p)} pieces"
            )
        src_words, tgt_words = word_ids(src_p, corpus.src_kind), word_ids(tgt_p, corpus.tgt_kind)
        n_src, n_tgt = max(src_words, default=-1) + 1, max(tgt_words, default=-1) + 1
        _check_gold(corpus.sure[i], n_src, n_tgt, i, corpus.src_first, "sure")
        if corpus.possible is not None:
            _check_gold(corpus.possible[i], n_src, n_tgt, i, corpus.src_first, "possible")
        words.append((src_words, tgt_words))
    return words


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


# --------------------------------------------------------------------------- the model pass
def _hypothesis_links(
    model: Seq2Seq,
    corpus: AlignmentCorpus,
    words: Sequence[WordIds],
    device: torch.device | str,
    batch_size: int,
    shift: bool,
) -> tuple[dict[str, list[Alignment]], int]:
    """Argmax links of every example for every attention map ("" for an RNN's single map), in
    example order, and the transformer's number of layers (0 for an RNN)."""
    n = len(corpus.examples)
    hyps: dict[str, list[Alignment]] = {}
    last_layer = 0
    for i, pooled in forced_word_attention(
        model, corpus.examples, words, shift=shift, device=device, batch_size=batch_size
    ):
        if pooled.dim() == 4:  # (L, H, Tw, Sw)
            last_layer = pooled.shape[0]
        for key, method in _maps(pooled):
            links = argmax_alignment(select_map(pooled, method), src_first=corpus.src_first)
            hyps.setdefault(key, [set() for _ in range(n)])[i] = links
    return hyps, last_layer


def _maps(pooled: Tensor) -> list[tuple[str, AlignmentMethod]]:
    """(map name, method) of every map of one example's word attention: "" for an RNN's
    (Tw, Sw); for a transformer's (L, H, Tw, Sw) every head, then its layer's head mean."""
    if pooled.dim() == 2:
        return [("", AlignmentMethod())]
    L, H = pooled.shape[:2]
    maps: list[tuple[str, AlignmentMethod]] = []
    for layer in range(1, L + 1):
        for head in range(1, H + 1):
            maps.append((f"layer{layer}/head{head}", AlignmentMethod(layer=layer, head=head)))
        maps.append((f"layer{layer}/mean", AlignmentMethod(layer=layer)))
    return maps


# -------------------------------------------------------------------------------- scores
def _scores(
    hyps: dict[str, list[Alignment]],
    corpus: AlignmentCorpus,
    last_layer: int,
    per_map_scores: Sequence[str],
) -> dict[str, float]:
    """The overall scores first, then per layer/head in layer order (TensorBoard lists by
    name)."""
    if not hyps:  # no examples: nothing hypothesised, nothing to find
        hyps = {"": []}
    metrics: dict[str, float] = {}
    per_map: dict[str, dict[str, float]] = {name: {} for name in per_map_scores}
    for key, links in hyps.items():
        scores = alignment_error_rate(links, corpus.sure, corpus.possible)
        if key:
            for name in per_map_scores:
                per_map[name][f"{name}/{key}"] = scores[name]
        if key == "" or key == f"layer{last_layer}/mean":
            metrics.update({name: scores[name] for name in ALIGNMENT_SCORES})
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
