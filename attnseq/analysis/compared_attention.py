"""The attention of compared checkpoints: the entropy of the cross-attention rows of each
system's own outputs, teacher-forced, overall and per length bucket, and with gold links the AER
of its attention over the references (why outputs, and why references there:
docs/internals/evaluation.md)."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attnseq.errors import UserError

if TYPE_CHECKING:
    import torch

    from attnseq.models.loading import TrainedModel

Gold = tuple[list[set[tuple[int, int]]], list[set[tuple[int, int]]]]  # (sure, possible) links


@dataclass
class SystemAttention:
    """One system's attention measures (`system_attention`).

    entropy: mean row entropy H(w_t) = -sum_s w[t, s] ln w[t, s] in nats over the rows of the
        test set's decoded outputs, teacher-forced (the </s> row included; a transformer's the
        mean over its layers and heads); None without.
    bucket_entropy: the same per length bucket (None where a bucket has no rows).
    aer: "aer", "precision", "recall" against the gold links; None without them.
    reason: why the system has no attention measure at all; aer_reason: why it has no AER.
    """

    entropy: float | None = None
    bucket_entropy: list[float | None] | None = None
    aer: dict[str, float] | None = None
    reason: str | None = None
    aer_reason: str | None = None


def system_attention(
    checkpoint: Path | None,
    hypotheses: Sequence[str],
    sources: Sequence[str] | None,
    references: Sequence[str],
    members: Sequence[np.ndarray],
    gold: Gold | None = None,
    device: str = "auto",
    batch_size: int = 64,
) -> SystemAttention:
    """The attention measures of the system whose outputs are `hypotheses`, made by the model
    of `checkpoint` (None: a hypothesis file) from `sources`; `members`: the sentence indices
    of each length bucket; `gold`: (sure, possible) (source word, target word) links of each
    (source, reference) pair, or None; `device` "auto" for the checkpoint's own. The outputs
    are teacher-forced, which reproduces the attention the model had while decoding them; for
    the AER the references are (the gold links count their words), as `attnseq align --gold`
    aligns them (alignment/forced.py `align_sentences`, the attention method; Och & Ney 2003)."""
    from attnseq.models.pretrained import is_pretrained_reference

    if checkpoint is None:
        return SystemAttention(reason="no model (a hypothesis file)")
    if not (checkpoint.is_file() or is_pretrained_reference(checkpoint)):
        return SystemAttention(reason=f"its checkpoint {checkpoint} is not on this machine")
    if sources is None:
        return SystemAttention(reason="no sources to attend over")
    from attnseq.config.devices import resolve_device
    from attnseq.models.loading import load_trained_model

    trained = load_trained_model(checkpoint)
    if not trained.model.has_attention:
        return SystemAttention(reason="no cross-attention (model.attention.score=none)")
    where = resolve_device(trained.cfg.trainer.device if device == "auto" else device)
    try:
        sums = _entropy_sums(trained, sources, hypotheses, where, batch_size)
    except ValueError as error:  # a model that returns no attention weights
        return SystemAttention(reason=str(error))
    result = SystemAttention(_mean(sums), [_mean(sums[inside]) for inside in members])
    if gold is not None:
        result.aer, result.aer_reason = _aer(trained, sources, references, gold, where, batch_size)
    return result


def _entropy_sums(
    trained: "TrainedModel",
    sources: Sequence[str],
    hypotheses: Sequence[str],
    device: "torch.device",
    batch_size: int,
) -> np.ndarray:
    """(N, 2) summed row entropy and rows of each (source, output) pair, both encoded with the
    model's tokenizers and cut to its positions (one of them for BOS/EOS)."""
    from attnseq.alignment.diagnostics import example_entropies
    from attnseq.models.positional import position_limit

    limit = position_limit(trained.model)
    keep = None if limit is None else limit - 1
    src_tok, tgt_tok = trained.tokenizers.src, trained.tokenizers.tgt
    examples = [
        (src_tok.encode(source)[:keep], tgt_tok.encode(output)[:keep])
        for source, output in zip(sources, hypotheses, strict=True)
    ]
    return example_entropies(trained.model.to(device), examples, device, batch_size)


def _mean(sums: np.ndarray) -> float | None:
    """Mean row entropy of the examples of `sums` (N, 2); None when they have no rows."""
    rows = float(sums[:, 1].sum())
    return float(sums[:, 0].sum()) / rows if rows else None


def _aer(
    trained: "TrainedModel",
    sources: Sequence[str],
    references: Sequence[str],
    gold: Gold,
    device: "torch.device",
    batch_size: int,
) -> tuple[dict[str, float] | None, str | None]:
    """(AER, precision and recall of the attention's links against `gold`, None) or (None,
    why not): a line that does not tokenize into its words, or is too long for the model."""
    from attnseq.alignment.forced import AlignmentMethod, align_sentences
    from attnseq.alignment.word_links import alignment_error_rate

    try:
        links = align_sentences(
            trained, sources, references, AlignmentMethod(), device=device, batch_size=batch_size
        ).links
    except UserError as error:
        return None, str(error)
    scores = alignment_error_rate(links, *gold)
    return {name: scores[name] for name in ("aer", "precision", "recall")}, None
