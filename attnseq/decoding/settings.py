"""What decoding is asked for and what it returns, and the pieces both searches share.

How to decode is a `DecodingConfig` (attnseq/config/schema.py), the `decoding.*` node of a
run's config taken as it is: beam size, n-best, output limits, length penalty, constraints,
or sampling. `with_changes` gives a model's settings with some of them changed (the options of
`attnseq eval` and `attnseq translate`, the Python API's keywords), `check` says what is out
of range. `Hypothesis` is one decoded output. `gnmt_length_penalty` is the lp(Y) of the GNMT
length-normalised score s(Y, X) = log P(Y | X) / lp(Y) (Wu et al. 2016, eq. 14) that outputs
are ranked by (beam_search.py).

Both searches give PAD and BOS probability zero (`never_pad_or_bos`): neither is ever a target.
With `eos_at_limit`, EOS is the only token at the position after the output limit
(`eos_at_limit_only`).

Shapes: B batch, R rows of the live batch, V target vocabulary.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, overload

import torch
from torch import Tensor

from attnseq.config.checks import decoding_problems, field_problems
from attnseq.config.schema import SAMPLING_KEYS, DecodingConfig
from attnseq.errors import UserError
from attnseq.models.seq2seq import CopyInputs, DecoderState, Seq2Seq

NEG_INF = float("-inf")


def check(settings: DecodingConfig) -> None:
    """Raise ValueError naming every setting that is out of range (the bounds the schema
    declares) or that contradicts another (nbest above the beam, sampling with a beam)."""
    problems = field_problems(settings) + decoding_problems(settings, prefix="")
    if problems:
        raise ValueError("; ".join(problems))


def change_problems(changes: Mapping[str, Any], name: Callable[[str], str] = str) -> list[str]:
    """What is wrong with `changes` (setting -> value; None: not given) whatever settings they
    change, one line each, the settings named as `name(setting)` says (e.g. "--beam" on the
    command line): a sampling setting without sample=True, sample=True with a beam or nbest
    above 1."""
    given = {key: value for key, value in changes.items() if value is not None}
    problems = []
    if given.get("sample"):
        for key in ("beam", "nbest"):
            if given.get(key, 1) != 1:
                problems.append(
                    f"{name('sample')} draws the outputs and {name(key)} {given[key]} searches "
                    f"for them: give one of them ({name('num_samples')} N draws N outputs per "
                    "input)"
                )
    else:
        unread = ", ".join(name(key) for key in SAMPLING_KEYS if key in given)
        if unread:
            problems.append(f"{unread}: sampling options, they go with {name('sample')}")
    return problems


def with_changes(settings: DecodingConfig, changes: Mapping[str, Any]) -> DecodingConfig:
    """`settings` with `changes` (setting -> value of its field's type; None keeps the setting)
    put in by `dataclasses.replace`. sample=True draws the outputs, with beam and nbest 1; a
    beam or nbest given without it searches (sample=False).

    Raises:
        UserError: `change_problems`, or a result that `check` refuses (e.g. nbest above the
            beam it keeps).
    """
    problems = change_problems(changes)
    if problems:
        raise UserError("; ".join(problems))
    given = {key: value for key, value in changes.items() if value is not None}
    if given.get("sample"):
        given = {"beam": 1, "nbest": 1, **given}
    elif "beam" in given or "nbest" in given:
        given = {"sample": False, **given}
    result = replace(settings, **given)
    try:
        check(result)
    except ValueError as error:
        raise UserError(f"invalid decoding settings: {error}") from None
    return result


def outputs_per_input(settings: DecodingConfig) -> int:
    """How many outputs `decode` returns per input: nbest, or the number of samples."""
    return settings.num_samples if settings.sample else settings.nbest


def is_greedy(settings: DecodingConfig) -> bool:
    """Greedy decoding gives exactly what `settings` ask for."""
    return (
        not settings.sample
        and settings.beam == 1
        and settings.nbest == 1
        and settings.min_length == 0
        and not settings.no_repeat_ngram
        and not settings.coverage_penalty
    )


@dataclass
class Hypothesis:
    """One decoded output.

    tokens: target ids without BOS and EOS.
    score: raw model score, the sum of the token log-probabilities (EOS included when produced).
    attention: cross-attention while producing it, (T_out, S) for RNNs or (L, H, T_out, S) for
        transformers, over the real source positions only; None if not requested. T_out is the
        number of scored positions: len(tokens), plus one for EOS when it was produced.
    normalized_score: score / lp(T_out) (+ cp with a coverage penalty), the GNMT-normalised
        score beam search ranks by; None from `greedy_decode` (which does not rank), filled in
        by `decode`.

    Copy models: tokens may hold ids >= V, source words outside the target vocabulary
    (`Tokenizer.decode_extended` writes them out).
    """

    tokens: list[int]
    score: float
    attention: Tensor | None = None
    normalized_score: float | None = None


def max_output_lengths(src_lengths: Tensor, ratio: float, extra: int) -> Tensor:
    """Per-sentence output limit: ratio * source length + extra, as a (B,) long tensor."""
    return (src_lengths.float() * ratio).long() + extra


@overload
def gnmt_length_penalty(lengths: int, alpha: float, offset: float = 5.0) -> float: ...
@overload
def gnmt_length_penalty(lengths: Tensor, alpha: float, offset: float = 5.0) -> Tensor: ...
def gnmt_length_penalty(lengths: int | Tensor, alpha: float, offset: float = 5.0) -> float | Tensor:
    """lp(Y) = ((k + |Y|) / (k + 1)) ^ alpha, k = `offset` (Wu et al. 2016, eq. 14, have k = 5;
    k = 0 is |Y|^alpha, Hugging Face's and fairseq's): of one length |Y| (in Python floats),
    or elementwise over a tensor of lengths (float32)."""
    if isinstance(lengths, Tensor):
        lengths = lengths.float()
    return ((offset + lengths) / (offset + 1.0)) ** alpha


def eos_at_limit_only(log_probs: Tensor, at_limit: Tensor, eos_id: int) -> Tensor:
    """(R, V) log-probabilities with EOS the only token, at log-probability 0, in the rows
    where `at_limit` (R,) bool is True: the position after the output limit with
    `eos_at_limit` (as Hugging Face's forced EOS scores it)."""
    forced = torch.full_like(log_probs[:1], NEG_INF)  # (1, V)
    forced[:, eos_id] = 0.0
    return torch.where(at_limit.unsqueeze(1), forced, log_probs)


def start_decoding(
    model: Seq2Seq, src: Tensor, src_lengths: Tensor, copy_inputs: CopyInputs
) -> DecoderState:
    """`model.start_decoding`, with the extended source for copy models (plain models take
    no copy inputs)."""
    if copy_inputs.get("src_ext") is None:
        return model.start_decoding(src, src_lengths)
    return model.start_decoding(src, src_lengths, **copy_inputs)  # type: ignore[call-arg]


def never_pad_or_bos(log_probs: Tensor, model: Seq2Seq) -> Tensor:
    """Give PAD and BOS probability zero in (R, V) log-probabilities, in place.

    Neither is ever a target, so a trained model gives them almost nothing; an undertrained one
    may not, and an output of invisible tokens (text decoding drops them) helps nobody.
    """
    for token in (model.pad_id, model.bos_id):
        if token != model.eos_id:
            log_probs[:, token] = NEG_INF
    return log_probs
