"""Search for the output sequence over the `Seq2Seq` step interface, for both model families and
their ensembles: greedy decoding, sampling and beam search, and `decode`, the one a
`DecodingConfig` asks for. docs/internals/decoding.md tours them.

Shapes: B batch, S source length, V target vocabulary.
"""

from typing import Unpack

import torch
from torch import Tensor

from attnseq.config.schema import DecodingConfig
from attnseq.decoding.beam_search import beam_search
from attnseq.decoding.greedy import greedy_decode
from attnseq.decoding.sampling import sample_decode, sampling_generator
from attnseq.decoding.settings import (
    Hypothesis,
    gnmt_length_penalty,
    is_greedy,
    max_output_lengths,
)
from attnseq.models.seq2seq import CopyInputs, Seq2Seq

__all__ = [
    "DecodingConfig",
    "Hypothesis",
    "beam_search",
    "decode",
    "gnmt_length_penalty",
    "greedy_decode",
    "max_output_lengths",
    "sample_decode",
    "sampling_generator",
]


def decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    settings: DecodingConfig,
    need_weights: bool = False,
    generator: torch.Generator | None = None,
    **copy_inputs: Unpack[CopyInputs],
) -> list[list[Hypothesis]]:
    """Decode a batch as `settings` ask: sampling with `settings.sample`, greedy decoding for
    beam 1 without n-best or constraints (what users mean by beam 1: beam search of width one
    may search past greedy's EOS for a better normalised score), beam search otherwise. The
    settings are checked where they are made (`with_changes`, a run's config).

    Args:
        src: (B, S) source ids, right-padded; src_lengths: (B,) real lengths.
        **copy_inputs: copy models: src_ext and n_oov, the source in the extended vocabulary
            (`Batch.copy_inputs()`).
        generator: sampling draws from it (`sampling_generator`); one seeded with
            settings.seed when None. A caller decoding many batches passes one.

    Returns:
        per input sentence, its n-best list (one hypothesis unless settings.nbest > 1), best
        first, or its samples in the order drawn; each with `normalized_score` set.
    """
    limits = max_output_lengths(
        src_lengths, settings.max_output_ratio, settings.max_output_extra
    )  # (B,)
    if settings.sample:
        samples = sample_decode(
            model, src, src_lengths, limits, settings, generator, need_weights, **copy_inputs
        )
        for drawn, limit in zip(samples, limits.tolist(), strict=True):
            _normalize(drawn, limit, settings)
        return samples
    if not is_greedy(settings):
        return beam_search(model, src, src_lengths, limits, settings, need_weights, **copy_inputs)
    hypotheses = greedy_decode(
        model,
        src,
        src_lengths,
        limits,
        need_weights,
        eos_at_limit=settings.eos_at_limit,
        first_token=settings.forced_first_token,
        **copy_inputs,
    )
    for hypothesis, limit in zip(hypotheses, limits.tolist(), strict=True):
        _normalize([hypothesis], limit, settings)
    return [[hypothesis] for hypothesis in hypotheses]


def _normalize(hypotheses: list[Hypothesis], limit: int, settings: DecodingConfig) -> None:
    """Set `normalized_score` = score / lp of hypotheses that stopped at EOS (then they scored
    len + 1 positions) or at the output limit (with `eos_at_limit`, EOS follows there too),
    as greedy decoding and sampling do."""
    alpha, offset = settings.length_penalty, settings.length_penalty_offset
    for hypothesis in hypotheses:
        n_tokens = len(hypothesis.tokens)
        ended = n_tokens < limit or settings.eos_at_limit
        scored = n_tokens + 1 if ended else max(limit, 1)
        lp = gnmt_length_penalty(scored, alpha, offset)
        hypothesis.normalized_score = hypothesis.score / lp
