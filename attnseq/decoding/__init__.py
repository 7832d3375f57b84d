"""Search for the output sequence: greedy decoding and batched beam search over the `Seq2Seq`
step interface, for both model families.

    settings.py      DecodingSettings (how to decode), Hypothesis (one output), output limits,
                     the GNMT length penalty, and the step helpers both searches share
    greedy.py        greedy_decode
    beam_search.py   beam_search: ranking, stopping, n-gram blocking, coverage penalty
    beam_hypotheses.py  the candidates and finished hypotheses of a beam search, and the
                     attention of each hypothesis along its back-pointers
    this file        decode: the search a `DecodingSettings` asks for (plain greedy decoding
                     for beam 1: beam_search.py says why)

Both families decode incrementally (`start_decoding` once, then `decode_step` per token: the RNN
carries its hidden state, the transformer its key/value cache). Rows that are done are dropped
from the batch, so a long run-away hypothesis does not keep the whole batch busy.

Copy models (pointer-generators, models/copy.py) score an extended vocabulary of V + n_oov ids:
`decode_step` returns log-probabilities over it, the searches treat it as any vocabulary, and the
model itself reads an emitted id >= V back as <unk>. Its `CopyInputs`, `src_ext` and `n_oov` (the
source in the extended vocabulary), go to the model's `start_decoding`; plain models never see
them.

Shapes: B batch, S source length, V target vocabulary.
"""

from typing import Unpack

from torch import Tensor

from attnseq.decoding.beam_search import beam_search
from attnseq.decoding.greedy import greedy_decode
from attnseq.decoding.settings import (
    DecodingSettings,
    Hypothesis,
    gnmt_length_penalty,
    max_output_lengths,
)
from attnseq.models.seq2seq import CopyInputs, Seq2Seq

__all__ = [
    "DecodingSettings",
    "Hypothesis",
    "beam_search",
    "decode",
    "gnmt_length_penalty",
    "greedy_decode",
    "max_output_lengths",
]


def decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    settings: DecodingSettings,
    need_weights: bool = False,
    **copy_inputs: Unpack[CopyInputs],
) -> list[list[Hypothesis]]:
    """Decode a batch as `settings` ask: greedy for beam 1 without n-best or constraints (the
    same output, a little faster), beam search otherwise.

    Args:
        src: (B, S) source ids, right-padded; src_lengths: (B,) real lengths.
        **copy_inputs: copy models: src_ext and n_oov, the source in the extended vocabulary
            (`Batch.copy_inputs()`).

    Returns:
        per input sentence, its n-best list (one hypothesis unless settings.nbest > 1), best
        first, each with `normalized_score` set.
    """
    settings.check()
    limits = max_output_lengths(
        src_lengths, settings.max_output_ratio, settings.max_output_extra
    )  # (B,)
    if not settings.is_greedy:
        return beam_search(model, src, src_lengths, limits, settings, need_weights, **copy_inputs)
    hypotheses = greedy_decode(model, src, src_lengths, limits, need_weights, **copy_inputs)
    for hypothesis, limit in zip(hypotheses, limits.tolist(), strict=True):
        # greedy stops at EOS (then it scored len + 1 positions) or at the limit
        n_tokens = len(hypothesis.tokens)
        scored = n_tokens + 1 if n_tokens < limit else max(limit, 1)
        penalty = gnmt_length_penalty(scored, settings.length_penalty)
        hypothesis.normalized_score = hypothesis.score / penalty
    return [[hypothesis] for hypothesis in hypotheses]
