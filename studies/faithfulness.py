"""Faithfulness of source attributions: whether the source words a method (attention, a gradient
method, rollout: attnseq/alignment/attribution.py) ranks highest are the words the model's
prediction depends on, and how far two methods agree.

Deletion curve (Samek et al. 2017, "Evaluating the Visualization of What a Deep Neural Network
Has Learned", IEEE TNNLS, "most relevant first" perturbation; DeYoung et al. 2020, ERASER,
"comprehensiveness"). For each sentence pair (x, y) teacher-forced, each decoder step t (the
step that predicts y_t; the last one predicts </s>) and each k in `ks`, the k source words the
method ranks highest for step t are masked and

    drop_t(k) = log p(y_t | y_<t, x) - log p(y_t | y_<t, x with those k words masked)

is read from one more forward pass. The curve is the mean of drop_t(k) over every step of
every pair, for each k; k = 0 masks nothing and measures 0 (up to the float noise of batching:
the unmasked source goes through the same path). Its normalised area (`curve_area`) is the
mean drop over the range of k: higher = the method's top words matter more to the model = more
faithful. A random order of the source words is the baseline (`random_ranking`): one random
permutation per sentence serves every step, since the k words of a uniform permutation are a
uniform k-subset at every step either way, and it costs K forward passes per sentence instead
of K x T.

Masking keeps positions: a masked word's pieces are replaced by one token id, the sequence
length, the positional encodings and the attention mask stay as they are, so only the word's
content is removed. `mask="pad"` (the default) uses the padding id, whose embedding is the zero
vector in every attnseq model (nn.Embedding's padding_idx: never trained), i.e. "no word
here"; `mask="unk"` uses <unk>, which sentencepiece with character coverage 1.0 almost never
produces in training, so its embedding is an untrained vector rather than an absence. A word
is masked whole (every piece of it); pieces outside any word (a char tokenizer's spaces) never
are. k larger than a sentence's word count masks all its words.

Word-level maps for alignment error rate: a method's piece-level source weights (T + 1, S) go
through the pooling `attnseq align` uses (alignment.word_attention: a source word sums its
pieces, a target word averages its pieces' rows; the </s> row is dropped), each target word is
linked to its highest-weighted source word (alignment.argmax_alignment), and the corpus AER of
Och & Ney (2003) is computed by alignment.alignment_error_rate (`alignment_scores`).

Agreement between two methods (`agreement`), over the rows of their word-level maps: the share
of rows whose argmax source word is the same, and the mean Spearman rank correlation of the
rows (Jain & Wallace 2019, "Attention is not Explanation", NAACL, section 4.1, compare
attention with gradient attributions by rank correlation, Kendall's tau there):

    rho = Pearson correlation of the two rows' ranks (ties get their average rank)

over rows with at least two source words and no constant row (rho is undefined there).

Shapes: T target pieces (T + 1 decoder steps), S source pieces, Sw/Tw source/target words, R rows
(decoder steps).

This module serves one study, attribution_faithfulness.py beside it (docs/results/attribution.md),
and is not part of the installed package; it imports attnseq like any user code.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnseq.alignment.word_links import alignment_error_rate, argmax_alignment, word_attention
from attnseq.data.batching import Example, collate
from attnseq.data.word_alignments import Alignment, Link, word_ids
from attnseq.models.seq2seq import Seq2Seq

MASK_TOKENS: tuple[str, ...] = ("pad", "unk")


# ------------------------------------------------------------------------- deletion curves
@dataclass(frozen=True)
class DeletionCurve:
    """The mean log-probability drop of the reference token with the top-k source words masked.

    ks: the numbers of masked words, ascending (0 first for a curve that starts at the model).
    drops: the mean drop at each k, nats (positive: the masked words mattered).
    steps: the decoder steps averaged at each k (every step of every pair).
    """

    ks: tuple[int, ...]
    drops: tuple[float, ...]
    steps: int

    @property
    def area(self) -> float:
        """The normalised area under the curve (`curve_area`)."""
        return curve_area(self.ks, self.drops)

    def as_dict(self) -> dict[str, object]:
        """ks, drops, steps and area, for a JSON report."""
        return {
            "ks": list(self.ks),
            "drops": list(self.drops),
            "steps": self.steps,
            "area": self.area,
        }


def curve_area(ks: Sequence[float], drops: Sequence[float]) -> float:
    """Area under a curve by the trapezoid rule, divided by the width of its k range:

        area = 1 / (k_n - k_0) * sum_i (k_{i+1} - k_i) * (d_i + d_{i+1}) / 2

    i.e. the curve's mean height, in the units of `drops` (nats), comparable between curves
    over the same ks.

    Raises:
        ValueError: fewer than two points, different lengths, or ks not strictly ascending.
    """
    if len(ks) != len(drops):
        raise ValueError(f"{len(ks)} ks but {len(drops)} drops")
    if len(ks) < 2:
        raise ValueError("a curve area needs at least two points")
    if any(b <= a for a, b in zip(ks, ks[1:], strict=False)):
        raise ValueError(f"ks must be strictly ascending, got {list(ks)}")
    total = sum(
        (k1 - k0) * (d0 + d1) / 2
        for k0, k1, d0, d1 in zip(ks, ks[1:], drops, drops[1:], strict=False)
    )
    return total / (ks[-1] - ks[0])


def source_word_scores(source: Tensor, src_word_ids: Sequence[int]) -> Tensor:
    """A method's piece-level source weights (R, S) summed per source word: (R, Sw). Each row
    stays a row (a decoder step); columns past `src_word_ids` and pieces with word id -1 are
    dropped, as alignment.word_attention drops them."""
    rows = source.shape[-2]
    return word_attention(source, src_word_ids, list(range(rows)))


def ranking(word_scores: Tensor) -> Tensor:
    """(R, Sw) long: each row's source words from the highest score down; equal scores keep
    the lower word index first (a stable sort), so the order is deterministic."""
    return torch.sort(word_scores, dim=-1, descending=True, stable=True).indices


def random_ranking(rows: int, n_words: int, generator: torch.Generator) -> Tensor:
    """(rows, n_words) long: one uniform random permutation of the source words, the same for
    every row (the module docstring says why one per sentence suffices)."""
    order = torch.randperm(n_words, generator=generator)
    return order.unsqueeze(0).expand(rows, n_words).clone()


@torch.no_grad()
def reference_log_probs(
    model: Seq2Seq,
    examples: Sequence[Example],
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 64,
) -> list[Tensor]:
    """log p(y_t | y_<t, x) of every example's reference target by teacher forcing: a (T + 1,)
    float32 CPU tensor per example (T target ids, then </s>), in the examples' order.

    Pairs are run in length-sorted batches of `batch_size`; the model is in eval mode for the
    pass and its mode is restored after.

    Raises:
        ValueError: a copy model (its forward needs the extended-vocabulary source).
    """
    if getattr(model, "copy", False):
        raise ValueError(
            "deletion curves read the model's own vocabulary; copy models are not supported"
        )
    was_training = model.training
    model.eval()
    results: list[Tensor] = [torch.empty(0)] * len(examples)
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i][0]), len(examples[i][1])))
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = collate(
                [examples[i] for i in chunk],
                chunk,
                pad_id=model.pad_id,
                bos_id=model.bos_id,
                eos_id=model.eos_id,
            ).to(device)
            logits = model(batch.src, batch.src_lengths, batch.tgt_in).logits  # (B, T+1, V)
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            chosen = log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T+1)
            for b, i in enumerate(chunk):
                results[i] = chosen[b, : len(examples[i][1]) + 1].cpu()
    finally:
        model.train(was_training)
    return results


def masked_source(
    src: Sequence[int], words: Sequence[int], masked: set[int], mask_id: int
) -> list[int]:
    """The source ids with every piece of the `masked` words replaced by `mask_id`."""
    return [mask_id if word in masked else token for token, word in zip(src, words, strict=True)]


def mask_id_of(model: Seq2Seq, mask: str, unk_id: int = 1) -> int:
    """The token id that masks a word: the model's pad id, or `unk_id` (module docstring)."""
    if mask not in MASK_TOKENS:
        raise ValueError(f"mask must be one of {', '.join(MASK_TOKENS)}, got {mask!r}")
    return model.pad_id if mask == "pad" else unk_id


def deletion_curve(
    model: Seq2Seq,
    examples: Sequence[Example],
    src_word_ids: Sequence[Sequence[int]],
    rankings: Sequence[Tensor],
    ks: Sequence[int],
    *,
    mask_id: int,
    device: torch.device | str = "cpu",
    batch_size: int = 64,
) -> DeletionCurve:
    """The deletion curve of one ranking of the source words per decoder step (module docstring).

    Args:
        model: the model whose predictions are explained (no copy model).
        examples: (source ids, reference target ids) without BOS/EOS.
        src_word_ids: the word index of every source piece of each example (`word_ids`).
        rankings: per example (T + 1, Sw) long: row t orders the source words for the step
            that predicts target piece t (`ranking`, `random_ranking`).
        ks: numbers of words to mask, ascending, >= 0.
        mask_id: the id a masked piece gets (`mask_id_of`).
        device, batch_size: where and how many masked sources per forward pass.

    Raises:
        ValueError: mismatched lengths or shapes, negative or unsorted ks.
    """
    _check_deletion_arguments(examples, src_word_ids, rankings, ks)
    jobs: list[Example] = []
    job_of: dict[tuple[int, tuple[int, ...]], int] = {}
    plans: list[list[tuple[int, int, int]]] = [[] for _ in ks]  # (example, step, job) per k
    for i, ((src, tgt), words, order) in enumerate(
        zip(examples, src_word_ids, rankings, strict=True)
    ):
        for k_index, k in enumerate(ks):
            for step in range(len(tgt) + 1):
                key = (i, tuple(sorted(order[step, :k].tolist())))
                if key not in job_of:  # steps that mask the same words share one pass
                    job_of[key] = len(jobs)
                    jobs.append((masked_source(src, words, set(key[1]), mask_id), tgt))
                plans[k_index].append((i, step, job_of[key]))
    base = reference_log_probs(model, examples, device=device, batch_size=batch_size)
    masked = reference_log_probs(model, jobs, device=device, batch_size=batch_size)
    drops = tuple(
        sum(float(base[i][step] - masked[job][step]) for i, step, job in plan) / len(plan)
        if plan
        else math.nan
        for plan in plans
    )
    return DeletionCurve(tuple(ks), drops, len(plans[0]) if plans else 0)


def _check_deletion_arguments(
    examples: Sequence[Example],
    src_word_ids: Sequence[Sequence[int]],
    rankings: Sequence[Tensor],
    ks: Sequence[int],
) -> None:
    if not len(examples) == len(src_word_ids) == len(rankings):
        raise ValueError(
            f"{len(examples)} examples, {len(src_word_ids)} word id lists and {len(rankings)} "
            "rankings: need one of each per example"
        )
    if not ks or any(k < 0 for k in ks) or list(ks) != sorted(set(ks)):
        raise ValueError(f"ks must be distinct, ascending and >= 0, got {list(ks)}")
    for i, ((src, tgt), words, order) in enumerate(
        zip(examples, src_word_ids, rankings, strict=True)
    ):
        n_words = max(words, default=-1) + 1
        if len(words) != len(src):
            raise ValueError(f"example {i}: {len(src)} source ids but {len(words)} word ids")
        if tuple(order.shape) != (len(tgt) + 1, n_words):
            raise ValueError(
                f"example {i}: ranking of shape {tuple(order.shape)}, expected "
                f"({len(tgt) + 1}, {n_words}) (target pieces + 1, source words)"
            )


# -------------------------------------------------------------------------- word alignments
def word_map(
    source: Tensor,
    src_pieces: Sequence[str],
    tgt_pieces: Sequence[str],
    src_kind: str,
    tgt_kind: str,
) -> Tensor:
    """A method's (T + 1, S) piece-level source weights as the (Tw, Sw) word-level map that
    `attnseq align` reads links from (module docstring); `*_kind` as `alignment.word_ids`."""
    return word_attention(source, word_ids(src_pieces, src_kind), word_ids(tgt_pieces, tgt_kind))


def alignment_scores(
    maps: Sequence[Tensor],
    sure: Sequence[set[Link]],
    possible: Sequence[set[Link]] | None = None,
    *,
    src_first: bool = True,
) -> tuple[dict[str, float], list[Alignment]]:
    """AER, precision and recall (alignment.alignment_error_rate) of the argmax links of word
    maps (Tw, Sw) against gold links, and the links themselves; `src_first` as
    alignment.argmax_alignment (the gold's order)."""
    links = [argmax_alignment(matrix, src_first=src_first) for matrix in maps]
    return alignment_error_rate(links, sure, possible), links


# ------------------------------------------------------------------------------- agreement
def average_ranks(values: Tensor) -> Tensor:
    """(R, N) float: the rank (1..N) of each value within its row, ties sharing the mean of
    the ranks they span."""
    below = (values.unsqueeze(-1) > values.unsqueeze(-2)).sum(-1)  # (R, N): values smaller
    equal = (values.unsqueeze(-1) == values.unsqueeze(-2)).sum(-1)  # (R, N): itself included
    return below.double() + (equal.double() + 1) / 2


def spearman_rows(a: Tensor, b: Tensor) -> Tensor:
    """(R,) Spearman's rho of each pair of rows of a and b (R, N); NaN where it is undefined
    (N < 2, or a constant row)."""
    if a.shape != b.shape:
        raise ValueError(f"rows of shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    ra, rb = average_ranks(a.double()), average_ranks(b.double())
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    denominator = (ra.square().sum(-1) * rb.square().sum(-1)).sqrt()
    rho = (ra * rb).sum(-1) / denominator
    return torch.where(denominator > 0, rho, torch.full_like(rho, math.nan))


def agreement(maps_a: Sequence[Tensor], maps_b: Sequence[Tensor]) -> dict[str, float]:
    """How far two methods' word maps (one (rows, Sw) pair per sentence) agree:

    argmax: the share of rows whose highest-weighted source word is the same (ties to the
        lower index, as argmax_alignment);
    spearman: the mean Spearman rho over the rows where it is defined;
    rows, spearman_rows: how many rows each is over.
    """
    if len(maps_a) != len(maps_b):
        raise ValueError(f"{len(maps_a)} maps against {len(maps_b)}")
    same = rows = 0
    rhos: list[float] = []
    for a, b in zip(maps_a, maps_b, strict=True):
        a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
        if a.shape != b.shape:
            raise ValueError(f"maps of shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
        if a.numel() == 0:
            continue
        same += int((a.argmax(-1) == b.argmax(-1)).sum())
        rows += a.shape[0]
        rho = spearman_rows(a, b)
        rhos.extend(rho[~rho.isnan()].tolist())
    return {
        "argmax": same / rows if rows else math.nan,
        "spearman": sum(rhos) / len(rhos) if rhos else math.nan,
        "rows": float(rows),
        "spearman_rows": float(len(rhos)),
    }
