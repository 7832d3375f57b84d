"""Batched beam search over the `Seq2Seq` step interface, for both model families.

Beam search (as in Sutskever et al. 2014, section 3.2; Wu et al. 2016, section 7) keeps the K
best partial hypotheses of every sentence. All live hypotheses of all sentences are one batch of
B_live * K rows (rows of one sentence are contiguous), so one `decode_step` serves them all. At
each step, over the K * V one-token extensions of a sentence:

    score(y_1..y_t) = sum_i log p(y_i | y_<i, x)                          (raw model score)

the 2K best candidates are taken; EOS candidates among the first K finish (a beam of size K
would have kept them), and the first K candidates that are not EOS stay live. Hypotheses are
ranked by the GNMT length-normalised score (Wu et al. 2016, "Google's Neural Machine Translation
System", eq. 14, without the coverage penalty; settings.py):

    s(Y, X) = log P(Y | X) / lp(Y)        lp(Y) = ((5 + |Y|) / 6) ^ alpha

with |Y| the number of scored positions (output tokens plus EOS when it was produced); alpha = 0
ranks by the raw score, alpha > 0 favours longer outputs.

Stopping. A sentence is done when its `nbest` best finished hypotheses cannot be beaten by any
live beam: log-probabilities are <= 0, so a live hypothesis with raw score s can at best reach
s / lp(L), where L is the final length that maximises lp (its maximum length for alpha > 0, the
next step for alpha < 0). Then its n-best list can no longer change, and continuing would be
wasted work (this needs only `nbest` finished hypotheses, not K, for the same result). A
sentence also stops at its length limit: the K best candidates of its last step all finish, those
that are not EOS without one, as greedy decoding does. Done sentences leave the batch: one
`reorder_state` per step selects the parent row of every surviving beam of every sentence that
goes on.

With K = 1 and alpha = 0 this is exactly greedy decoding (same tokens, same score); with
alpha > 0 a single beam may search on past greedy's EOS for a better normalised score, which is
why `decode` runs plain greedy decoding for beam 1 (what users mean by it). For K > 1
beam search usually finds a better raw score than greedy, but not always: the greedy path may
fall out of the beam before it ends (an EOS candidate outside the K best is pruned, as in
fairseq), so a test of "beam >= greedy" is an observation about a model, not a theorem; with K
at least the number of possible outputs it is exact search (tests/test_decoding.py checks both).

Coverage penalty (Wu et al. 2016, eq. 14; `coverage_penalty` = beta > 0, coverage_penalty.py):
finished hypotheses are ranked by log P(Y | X) / lp(Y) + cp(X; Y), with cp computed from the
attention each live row has accumulated (carried per row, reordered with the beams). The live
beams are still chosen by raw score; cp only ranks the finished hypotheses (and
`Hypothesis.normalized_score` includes it). cp <= 0 can only grow as a hypothesis attends to more
of the source, so the stopping bound above stays an upper bound.

Attention under beam search is gathered along back-pointers rather than carried in the state:
every step stores the cross-attention of its input rows (R_t, S) or (R_t, L, H, S) and, for each
row of the next step, the row of its parent. A finished hypothesis records the step and row that
produced its last position; at the end, one walk backwards over the steps (vectorised over all
returned hypotheses) picks each position's weights from its ancestor's row. This copies nothing
per step (carrying would re-index a growing (R, t, ...) history every step, O(T^2) copies).

Shapes: B batch, K beam size, V target vocabulary, S source length, T output length, R rows of
the live batch (B_live at the first step, B_live * K later), N = nbest.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from attnseq.decoding.coverage_penalty import BeamCoverage
from attnseq.decoding.settings import (
    NEG_INF,
    DecodingSettings,
    Hypothesis,
    gnmt_length_penalty,
    never_pad_or_bos,
    start_decoding,
)
from attnseq.models.seq2seq import Seq2Seq


@dataclass
class _Finished:
    """The N best finished hypotheses of every sentence, best first (-inf marks empty slots).

    norm, raw: (B, N) normalised and raw scores.
    tokens: (B, N, T_max) output ids, padded; length: (B, N) output tokens (EOS excluded).
    step, row: (B, N) the step that scored the last position and the row (in that step's
        input batch) that produced it: where the attention back-tracking starts.
    """

    norm: Tensor
    raw: Tensor
    tokens: Tensor
    length: Tensor
    step: Tensor
    row: Tensor

    @classmethod
    def empty(
        cls, batch: int, n: int, longest: int, pad_id: int, device: torch.device
    ) -> "_Finished":
        return cls(
            norm=torch.full((batch, n), NEG_INF, device=device),
            raw=torch.full((batch, n), NEG_INF, device=device),
            tokens=torch.full((batch, n, longest), pad_id, dtype=torch.long, device=device),
            length=torch.zeros(batch, n, dtype=torch.long, device=device),
            step=torch.zeros(batch, n, dtype=torch.long, device=device),
            row=torch.zeros(batch, n, dtype=torch.long, device=device),
        )

    def merge(self, sentences: Tensor, new: "_Finished") -> None:
        """Keep the N best of the old entries of `sentences` (B_live,) and `new` (B_live, K)."""
        n = self.norm.size(1)
        norm = torch.cat([self.norm[sentences], new.norm], dim=1)  # (B_live, N + K)
        best_norm, pick = norm.topk(n, dim=1)  # (B_live, N), best first
        self.norm[sentences] = best_norm
        for name in ("raw", "length", "step", "row"):
            both = torch.cat([getattr(self, name)[sentences], getattr(new, name)], dim=1)
            getattr(self, name)[sentences] = both.gather(1, pick)
        both = torch.cat([self.tokens[sentences], new.tokens], dim=1)  # (B_live, N + K, T_max)
        index = pick.unsqueeze(-1).expand(-1, -1, both.size(-1))  # (B_live, N, T_max)
        self.tokens[sentences] = both.gather(1, index)


def _banned_by_ngrams(history: Tensor, n: int, vocab_size: int) -> Tensor:
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


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    *,
    beam_size: int,
    length_penalty: float = 1.0,
    nbest: int = 1,
    min_length: int = 0,
    no_repeat_ngram: int = 0,
    need_weights: bool = False,
    coverage_penalty: float = 0.0,
    src_ext: Tensor | None = None,
    n_oov: int = 0,
) -> list[list[Hypothesis]]:
    """Batched beam search (see the module docstring for the algorithm).

    Args:
        src: (B, S) source ids, right-padded; src_lengths: (B,) real lengths.
        max_lengths: (B,) output limits in tokens, EOS not counted (at least 1 is used).
        beam_size: K, live hypotheses per sentence.
        length_penalty: GNMT alpha; 0 ranks by the raw sum of log-probabilities.
        nbest: hypotheses returned per sentence, 1 <= nbest <= beam_size.
        min_length: EOS gets probability zero until this many tokens were produced.
        no_repeat_ngram: n > 0 forbids any n-gram from occurring twice in one output.
        need_weights: attach each hypothesis's cross-attention (see `Hypothesis`).
        coverage_penalty: beta of the GNMT coverage penalty (module docstring); 0 = off.
        src_ext, n_oov: copy models: (B, S) the source in the extended vocabulary, and its
            number of extra ids.

    Returns:
        per input sentence, up to `nbest` distinct hypotheses sorted by normalised score, best
        first (fewer only when fewer than `nbest` outputs have non-zero probability; a sentence
        where none has gets one empty hypothesis with score -inf).
    """
    DecodingSettings(
        beam=beam_size, nbest=nbest, min_length=min_length, coverage_penalty=coverage_penalty
    ).check()
    if no_repeat_ngram < 0:
        raise ValueError(f"no_repeat_ngram must be >= 0, got {no_repeat_ngram}")
    k, device, eos = beam_size, src.device, model.eos_id
    batch = src.size(0)
    max_lengths = max_lengths.to(device).clamp(min=1)  # (B,)
    longest = int(max_lengths.max())
    # lp for every |Y| in 0 .. longest + 1, looked up by index instead of recomputed per step
    lp = gnmt_length_penalty(torch.arange(longest + 2, device=device), length_penalty)
    finished = _Finished.empty(batch, nbest, longest, model.pad_id, device)

    state = start_decoding(model, src, src_lengths, src_ext, n_oov)
    live = torch.arange(batch, device=device)  # (B_live,) original sentence of each
    width = 1  # beams per live sentence: one (BOS) at the first step, K afterwards
    scores = torch.zeros(batch, device=device)  # (R,) raw scores of the live rows
    history = torch.empty(batch, 0, dtype=torch.long, device=device)  # (R, t) output so far
    prev = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)  # (R,)
    step_attention: list[Tensor] = []  # step t: (R_t, S) or (R_t, L, H, S)
    step_parents: list[Tensor] = []  # entry t: (R_{t+1},) parent row in step t's input
    coverage = None  # the attention each row has accumulated, for the coverage penalty
    if coverage_penalty:
        coverage = BeamCoverage(src_lengths.to(device), src.size(1), coverage_penalty)

    for step in range(longest):
        logits, attention, state = model.decode_step(
            prev, state, need_weights=need_weights or bool(coverage_penalty)
        )
        if coverage is not None:
            coverage.add(attention)  # this step included: what finishes now has produced it
        log_probs = never_pad_or_bos(torch.log_softmax(logits.float(), dim=-1), model)  # (R, V)
        vocab = log_probs.size(-1)
        if step < min_length:
            log_probs[:, eos] = NEG_INF
        if no_repeat_ngram and step >= no_repeat_ngram:
            banned = _banned_by_ngrams(history, no_repeat_ngram, vocab)  # (R, V)
            log_probs = log_probs.masked_fill(banned, NEG_INF)
        if need_weights and attention is not None:
            step_attention.append(attention)

        n_live = live.numel()
        # (R, V) -> (B_live, width * V): all extensions of one sentence's beams in one row
        candidates = (scores.unsqueeze(1) + log_probs).view(n_live, width * vocab)
        n_cand = min(2 * k, width * vocab)
        top_scores, top_index = candidates.topk(n_cand, dim=1)  # (B_live, C), best first
        if n_cand < 2 * k:  # tiny vocabulary: pad with impossible candidates
            filler = top_scores.new_full((n_live, 2 * k - n_cand), NEG_INF)
            top_scores = torch.cat([top_scores, filler], dim=1)  # (B_live, 2K)
            # parent 0, a token that is not EOS: it can only ever fill a dead live slot
            filler_index = torch.full_like(filler, (eos + 1) % vocab, dtype=torch.long)
            top_index = torch.cat([top_index, filler_index], dim=1)
        tokens = top_index % vocab  # (B_live, 2K)
        offsets = torch.arange(n_live, device=device).unsqueeze(1) * width  # (B_live, 1)
        parents = top_index // vocab + offsets  # (B_live, 2K) row in this step's input
        is_eos = (tokens == eos) & torch.isfinite(top_scores)
        at_limit = max_lengths[live] == step + 1  # (B_live,) last step of the sentence

        # EOS among the K best finishes; at the limit all K best finish (without EOS if not)
        finishing = (is_eos[:, :k] | at_limit.unsqueeze(1)) & torch.isfinite(top_scores[:, :k])
        if bool(finishing.any()):
            # (B_live, K): the candidates share the coverage of the rows they extend
            penalty = None if coverage is None else coverage.penalty(parents[:, :k])
            finished.merge(
                live,
                _finished_candidates(
                    finishing,
                    top_scores[:, :k],
                    tokens[:, :k],
                    is_eos[:, :k],
                    parents[:, :k],
                    history,
                    step,
                    lp,
                    longest,
                    model.pad_id,
                    penalty,
                ),
            )

        # the first K candidates in rank order that are not EOS stay live
        rank = torch.arange(2 * k, device=device) + (tokens == eos) * (2 * k)  # (B_live, 2K)
        pick = rank.topk(k, dim=1, largest=False).indices  # (B_live, K), ascending rank
        live_scores = top_scores.gather(1, pick)  # (B_live, K), best first
        live_tokens = tokens.gather(1, pick)
        live_parents = parents.gather(1, pick)

        # done: its n-best cannot change any more (module docstring, "Stopping")
        lp_best = torch.maximum(lp[step + 2].expand(n_live), lp[max_lengths[live]])  # (B_live,)
        bound = live_scores[:, 0] / lp_best  # (B_live,) best reachable normalised score
        worst = finished.norm[live, -1]  # (B_live,) the N-th best finished, -inf if none
        done = at_limit | (bound == NEG_INF) | ((worst > NEG_INF) & (bound <= worst))
        keep = (~done).nonzero().squeeze(1)  # (B_keep,)
        if keep.numel() == 0:
            break
        rows = live_parents[keep].reshape(-1)  # (B_keep * K,) flat parent row of each beam
        state = model.reorder_state(state, rows)
        history = torch.cat([history[rows], live_tokens[keep].reshape(-1, 1)], dim=1)
        scores = live_scores[keep].reshape(-1)  # (B_keep * K,)
        prev = history[:, -1]
        live = live[keep]
        width = k
        if coverage is not None:
            coverage.reorder(rows)
        if step_attention:
            step_parents.append(rows)

    return _assemble(finished, step_attention, step_parents, src_lengths)


def _finished_candidates(
    finishing: Tensor,
    raw: Tensor,
    tokens: Tensor,
    is_eos: Tensor,
    parents: Tensor,
    history: Tensor,
    step: int,
    lp: Tensor,
    longest: int,
    pad_id: int,
    coverage_penalty: Tensor | None = None,
) -> _Finished:
    """The K best candidates of this step as finished entries (-inf where not finishing).

    Args:
        finishing: (B_live, K) bool; raw, tokens, is_eos, parents: (B_live, K) per candidate.
        history: (R, step) output tokens of this step's input rows.
        coverage_penalty: (B_live, K) cp of each candidate, added to its normalised score.
    """
    n_live, k = raw.shape
    # step + 1 scored positions whether or not the last one is EOS
    score = raw / lp[step + 1]
    if coverage_penalty is not None:
        score = score + coverage_penalty
    norm = torch.where(finishing, score, NEG_INF)  # (B_live, K)
    out = torch.full((n_live, k, longest), pad_id, dtype=torch.long, device=raw.device)
    out[:, :, :step] = history[parents]  # (R, step) gathered -> (B_live, K, step)
    out[:, :, step] = torch.where(is_eos, pad_id, tokens)  # EOS is not an output token
    length = step + (~is_eos).long()  # (B_live, K)
    return _Finished(
        norm=norm,
        raw=torch.where(finishing, raw, NEG_INF),
        tokens=out,
        length=length,
        step=torch.full_like(length, step),
        row=parents,
    )


def _assemble(
    finished: _Finished,
    step_attention: list[Tensor],
    step_parents: list[Tensor],
    src_lengths: Tensor,
) -> list[list[Hypothesis]]:
    """Finished buffers -> per-sentence hypothesis lists, with attention gathered backwards."""
    found = torch.isfinite(finished.norm)  # (B, N)
    attention = _trace_attention(finished, found, step_attention, step_parents)
    norm, raw = finished.norm.tolist(), finished.raw.tolist()
    tokens, length = finished.tokens.tolist(), finished.length.tolist()
    last_step = finished.step.tolist()
    src_length = src_lengths.tolist()
    results: list[list[Hypothesis]] = []
    flat = 0  # position of (sentence, slot) among the found entries, the order of `attention`
    for sentence, row_found in enumerate(found.tolist()):
        hypotheses = []
        for slot, ok in enumerate(row_found):
            if not ok:
                continue
            weights = None
            if attention is not None:
                positions = last_step[sentence][slot] + 1
                weights = attention[flat, :positions]  # (T_out, S) or (T_out, L, H, S)
                weights = weights.movedim(0, -2)[..., : src_length[sentence]]
                flat += 1
            hypotheses.append(
                Hypothesis(
                    tokens=tokens[sentence][slot][: length[sentence][slot]],
                    score=raw[sentence][slot],
                    attention=weights,
                    normalized_score=norm[sentence][slot],
                )
            )
        if not hypotheses:  # every continuation had probability zero (constraints)
            hypotheses.append(Hypothesis(tokens=[], score=NEG_INF, normalized_score=NEG_INF))
        results.append(hypotheses)
    return results


def _trace_attention(
    finished: _Finished,
    found: Tensor,
    step_attention: list[Tensor],
    step_parents: list[Tensor],
) -> Tensor | None:
    """Each found hypothesis's attention, following its beam's back-pointers.

    Returns:
        (F, T_max, S) or (F, T_max, L, H, S) on the CPU, F = found.sum() in row-major order of
        (sentence, slot); rows past a hypothesis's own length are zero.
    """
    if not step_attention:
        return None
    last_step = finished.step[found]  # (F,)
    row = finished.row[found].clone()  # (F,) current row, starting at the last position
    n_steps = len(step_attention)
    out = step_attention[0].new_zeros(row.numel(), n_steps, *step_attention[0].shape[1:])
    for step in range(n_steps - 1, -1, -1):
        active = (last_step >= step).nonzero().squeeze(1)  # hypotheses that reach this step
        if active.numel() == 0:
            continue
        out[active, step] = step_attention[step][row[active]]
        if step > 0:
            row[active] = step_parents[step - 1][row[active]]
    return out.cpu()
