"""Sampling decoding: every output token is drawn at random from the model's next-token
distribution, reshaped by a temperature and truncated to its top-k or its nucleus.

At each step, from the model's log-probabilities log p(y | y_<t, x) over the vocabulary:

    temperature T > 0     p_T(y) = p(y)^(1/T) / sum_y' p(y')^(1/T) = softmax(z / T)
                          (z the logits; Ackley, Hinton and Sejnowski 1985; as in Holtzman
                          et al. 2020, section 3.3, eq. 4). T < 1 sharpens the distribution,
                          T > 1 flattens it; T -> 0 is greedy decoding.
    top-k (k > 0)         keep the k most probable tokens V^(k), p'(y) = p_T(y) / sum_{V^(k)}
                          (Fan, Lewis and Dauphin 2018, "Hierarchical Neural Story
                          Generation", section 5.4). k = 0 keeps every token.
    top-p, nucleus (p)    keep the smallest set V^(p) of most probable tokens with
                          sum_{y in V^(p)} p_T(y) >= p, p'(y) = p_T(y) / sum_{V^(p)}
                          (Holtzman, Buys, Du, Forbes and Choi 2020, "The Curious Case of
                          Neural Text Degeneration", ICLR, section 3.1, eq. 2-3). p = 1 keeps
                          every token; the most probable token is always kept.

The three apply in that order (temperature, then top-k, then top-p, as Hugging Face
`generate` and fairseq apply them), and the token is drawn from the renormalised result. PAD
and BOS are never drawn (`never_pad_or_bos`); EOS is blocked before `min_length`, and an n-gram
that would repeat is blocked with `no_repeat_ngram`, as in beam search.

A hypothesis's `score` is the sum of the model's own log-probabilities log p(y_t | y_<t, x) of
its tokens (EOS included when drawn), without temperature or truncation, so samples and beam
outputs are scored alike; `normalized_score` divides it by the GNMT length penalty as greedy
decoding does. `num_samples` outputs are drawn per input, each independently (the input's row
is repeated), and returned in the order drawn.

Reproducibility: the draws come from one `torch.Generator` seeded with `seed` on the decoding
device (`sampling_generator`); the same inputs, batches, device and seed give the same samples.
A caller decoding many batches makes one generator and passes it to every batch.

Shapes: B batch, R = B * num_samples rows, R_live rows still decoding, S source length,
V target vocabulary.
"""

from typing import Unpack

import torch
from torch import Tensor

from attnseq.config.schema import DecodingConfig
from attnseq.decoding.beam_search import _banned_by_ngrams
from attnseq.decoding.greedy import collect_hypotheses
from attnseq.decoding.settings import (
    NEG_INF,
    Hypothesis,
    eos_at_limit_only,
    never_pad_or_bos,
    start_decoding,
)
from attnseq.models.seq2seq import CopyInputs, Seq2Seq


def sampling_generator(seed: int, device: torch.device) -> torch.Generator:
    """The random generator sampling draws from, seeded, on the decoding device."""
    return torch.Generator(device=device).manual_seed(seed)


def filter_log_probs(log_probs: Tensor, settings: DecodingConfig) -> Tensor:
    """`settings.temperature`, `top_k` and `top_p` applied to (R, V) log-probabilities: the
    renormalised log-probabilities of the distribution to draw from (-inf for the tokens cut
    off)."""
    scaled = torch.log_softmax(log_probs / settings.temperature, dim=-1)  # softmax(z / T)
    if settings.top_k and settings.top_k < scaled.size(-1):
        kth = scaled.topk(settings.top_k, dim=-1).values[:, -1:]  # (R, 1) the k-th largest
        scaled = scaled.masked_fill(scaled < kth, NEG_INF)
    if settings.top_p < 1:
        scaled = _nucleus(torch.log_softmax(scaled, dim=-1), settings.top_p)
    return torch.log_softmax(scaled, dim=-1)


def _nucleus(log_probs: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose mass reaches `top_p` (Holtzman et
    al. 2020, eq. 2): a token stays when the mass of the tokens ranked above it is < top_p."""
    sorted_log_probs, order = log_probs.sort(dim=-1, descending=True)  # (R, V)
    probs = sorted_log_probs.exp()
    mass_before = probs.cumsum(dim=-1) - probs  # (R, V) mass ranked strictly above
    cut = mass_before >= top_p
    cut[:, 0] = False  # the most probable token always stays
    return log_probs.masked_fill(cut.scatter(1, order, cut), NEG_INF)


@torch.no_grad()
def sample_decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    settings: DecodingConfig,
    generator: torch.Generator | None = None,
    need_weights: bool = False,
    **copy_inputs: Unpack[CopyInputs],
) -> list[list[Hypothesis]]:
    """Draw `settings.num_samples` outputs for every input (module docstring).

    Args:
        src: (B, S) source ids; src_lengths: (B,); max_lengths: (B,) output limits (tokens,
            EOS not counted).
        settings: temperature, top_k, top_p, num_samples and seed shape the draws; min_length
            (no EOS before this many tokens) and no_repeat_ngram (block repeated n-grams) hold.
        generator: where the draws come from (one made from `settings.seed` if None).
        **copy_inputs: copy models: src_ext (B, S) and n_oov.

    Returns:
        per input, its `num_samples` hypotheses in the order drawn.
    """
    n, device = settings.num_samples, src.device
    if generator is None:
        generator = sampling_generator(settings.seed, device)
    rows = torch.arange(src.size(0), device=device).repeat_interleave(n)  # (R,)
    src, src_lengths = src[rows], src_lengths.to(device)[rows]
    max_lengths = max_lengths.to(device)[rows]
    if copy_inputs.get("src_ext") is not None:
        copy_inputs = {**copy_inputs, "src_ext": copy_inputs["src_ext"][rows]}
    longest = int(max_lengths.max())
    state = start_decoding(model, src, src_lengths, copy_inputs)
    prev = torch.full((rows.numel(),), model.bos_id, dtype=torch.long, device=device)
    active = torch.arange(rows.numel(), device=device)  # original row of each live row
    out = torch.full((rows.numel(), longest + 1), model.eos_id, dtype=torch.long, device=device)
    scores = torch.zeros(rows.numel(), device=device)
    step_weights: list[tuple[Tensor, Tensor]] = []
    for step in range(longest + 1):
        logits, attention, state = model.decode_step(prev, state, need_weights=need_weights)
        log_probs = never_pad_or_bos(torch.log_softmax(logits.float(), dim=-1), model)
        history = out[active, :step]  # (R_live, step)
        log_probs = _constrained(
            log_probs, history, model.eos_id, settings.min_length, settings.no_repeat_ngram
        )
        if settings.eos_at_limit:
            log_probs = eos_at_limit_only(log_probs, max_lengths[active] == step, model.eos_id)
        drawn = filter_log_probs(log_probs, settings).exp().nan_to_num()  # (R_live, V)
        drawn[drawn.sum(dim=-1) == 0, model.eos_id] = 1.0  # all forbidden: stop the row
        chosen = torch.multinomial(drawn, 1, generator=generator).squeeze(1)  # (R_live,)
        out[active, step] = chosen
        scores[active] += log_probs.gather(1, chosen.unsqueeze(1)).squeeze(1)
        if need_weights and attention is not None:
            step_weights.append((active, attention))
        keep = (chosen != model.eos_id) & (
            max_lengths[active] + int(settings.eos_at_limit) > step + 1
        )
        if not bool(keep.all()):
            keep_index = keep.nonzero().squeeze(1)
            active, chosen = active[keep_index], chosen[keep_index]
            if active.numel() == 0:
                break
            state = model.reorder_state(state, keep_index)
        prev = chosen
    flat = collect_hypotheses(out, scores, step_weights, src_lengths, max_lengths, model.eos_id)
    return [flat[start : start + n] for start in range(0, len(flat), n)]


def _constrained(
    log_probs: Tensor, history: Tensor, eos_id: int, min_length: int, no_repeat_ngram: int
) -> Tensor:
    """(R_live, V) log-probabilities with EOS blocked before `min_length` and every token that
    would repeat an n-gram of size `no_repeat_ngram` blocked, as beam search blocks them.

    Args:
        history: (R_live, step) the tokens drawn so far.
    """
    step = history.size(1)
    if step < min_length:
        log_probs[:, eos_id] = NEG_INF
    if no_repeat_ngram and step >= no_repeat_ngram:
        banned = _banned_by_ngrams(history, no_repeat_ngram, log_probs.size(-1))  # (R_live, V)
        log_probs = log_probs.masked_fill(banned, NEG_INF)
    return log_probs
