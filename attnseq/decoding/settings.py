"""What decoding is asked for and what it returns: the settings (a `DecodingConfig`, the
`decoding.*` node of a run's config) changed (`with_changes`) and checked (`check`) where they
are made, `Hypothesis` (one output), output limits, the GNMT length penalty, and what every
search shares: the start of decoding and the tokens a step may produce (`allowed_log_probs`).

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


def allowed_log_probs(
    logits: Tensor,
    model: Seq2Seq,
    history: Tensor,
    min_length: int = 0,
    no_repeat_ngram: int = 0,
    eos_only: Tensor | None = None,
    first_token: int | None = None,
) -> Tensor:
    """Next-token log-probabilities (R, V) of the live rows, -inf where decoding forbids the
    token: PAD and BOS always, EOS before `min_length` output tokens, a token that would
    repeat an n-gram of `no_repeat_ngram` tokens (0: none), every token but `first_token`
    at the first step (it gets log-probability 0, as Hugging Face's forced BOS scores it),
    and every token but EOS, which gets log-probability 0, in the rows of `eos_only` (the
    position after the output limit with `eos_at_limit`, as Hugging Face's forced EOS scores
    it; it wins over `first_token`, as there). Every search reads these.

    Args:
        logits: (R, V) of this step; history: (R, t) the output tokens so far.
        eos_only: (R,) bool, or None: no row.
        first_token: the id every output starts with (`DecodingConfig.forced_first_token`),
            or None.
    """
    log_probs = never_pad_or_bos(torch.log_softmax(logits.float(), dim=-1), model)  # (R, V)
    step = history.size(1)
    if step < min_length:
        log_probs[:, model.eos_id] = NEG_INF
    if no_repeat_ngram and step >= no_repeat_ngram:
        banned = banned_by_ngrams(history, no_repeat_ngram, log_probs.size(-1))  # (R, V)
        log_probs = log_probs.masked_fill(banned, NEG_INF)
    if first_token is not None and step == 0:
        log_probs = only_token(log_probs, first_token)
    if eos_only is not None:
        forced = only_token(log_probs, model.eos_id)
        log_probs = torch.where(eos_only.unsqueeze(1), forced, log_probs)
    return log_probs


def only_token(log_probs: Tensor, token: int) -> Tensor:
    """(R, V) log-probabilities that give `token` probability one in every row.

    Raises:
        UserError: `token` is no id of the V-token vocabulary.
    """
    if not 0 <= token < log_probs.size(-1):
        raise UserError(
            f"the forced first token {token} is none of the model's {log_probs.size(-1)} ids"
        )
    forced = torch.full_like(log_probs, NEG_INF)
    forced[:, token] = 0.0
    return forced


def banned_by_ngrams(history: Tensor, n: int, vocab_size: int) -> Tensor:
    """Tokens that would repeat an n-gram already in the history.

    Args:
        history: (R, t) output tokens so far, t >= n.
        n: n-gram size.

    Returns:
        (R, V) bool, True where the next token would complete an n-gram seen before.
    """
    t = history.size(1)
    ngrams = history.unfold(1, n, 1)  # (R, t - n + 1, n)
    suffix = history[:, t - n + 1 :]  # (R, n - 1): the prefix of the n-gram being completed
    match = (ngrams[:, :, :-1] == suffix.unsqueeze(1)).all(dim=-1)  # (R, t - n + 1)
    # unmatched n-grams point at a spare column V that is cut off afterwards
    banned = torch.where(match, ngrams[:, :, -1], vocab_size)  # (R, t - n + 1)
    mask = torch.zeros(history.size(0), vocab_size + 1, dtype=torch.bool, device=history.device)
    return mask.scatter_(1, banned, True)[:, :vocab_size]
