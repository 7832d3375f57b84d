"""Batched beam search over the `Seq2Seq` step interface (Sutskever et al. 2014, section 3.2; Wu
et al. 2016, section 7): the search (`beam_search`), the candidates and finished hypotheses as
tensors (`Candidates`, `Finished`), the GNMT coverage penalty (`BeamCoverage`) and the attention
of each hypothesis gathered along its back-pointers (`assemble`). docs/internals/decoding.md
explains the stopping rule and why beam 1 is not greedy decoding.

Shapes: B batch, K beam size, V target vocabulary, S source length, T output length, R rows of
the live batch (B_live at the first step, B_live * K later; R_t those of step t), N = nbest,
T_max the longest output limit, B_live sentences still searched, F hypotheses found, L layers,
H heads.
"""

from dataclasses import dataclass, field
from typing import NamedTuple, Unpack

import torch
from torch import Tensor

from attnseq.config.schema import DecodingConfig
from attnseq.decoding.settings import (
    NEG_INF,
    Hypothesis,
    allowed_log_probs,
    gnmt_length_penalty,
    start_decoding,
)
from attnseq.models.seq2seq import CopyInputs, DecoderState, Seq2Seq


class Candidates(NamedTuple):
    """One-token extensions of the live beams, per live sentence and best first, (B_live, C).

    scores: raw scores (-inf for impossible ones); tokens: the new token; parents: the row, in
    this step's input batch, that it extends; is_eos: the token is EOS and the candidate possible.
    """

    scores: Tensor
    tokens: Tensor
    parents: Tensor
    is_eos: Tensor

    def first(self, k: int) -> "Candidates":
        """The k best of every sentence, (B_live, k) each."""
        return Candidates(*(field[:, :k] for field in self))

    def gather(self, index: Tensor) -> "Candidates":
        """The candidates at `index` (B_live, k) of every sentence, in that order."""
        return Candidates(*(field.gather(1, index) for field in self))


@dataclass
class Finished:
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
    ) -> "Finished":
        return cls(
            norm=torch.full((batch, n), NEG_INF, device=device),
            raw=torch.full((batch, n), NEG_INF, device=device),
            tokens=torch.full((batch, n, longest), pad_id, dtype=torch.long, device=device),
            length=torch.zeros(batch, n, dtype=torch.long, device=device),
            step=torch.zeros(batch, n, dtype=torch.long, device=device),
            row=torch.zeros(batch, n, dtype=torch.long, device=device),
        )

    def merge(self, sentences: Tensor, new: "Finished") -> None:
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


def finished_candidates(
    finishing: Tensor,
    candidates: Candidates,
    history: Tensor,
    step: int,
    lp: Tensor,
    longest: int,
    pad_id: int,
    coverage_penalty: Tensor | None = None,
) -> Finished:
    """The K best candidates of this step as finished entries (-inf where not finishing).

    Args:
        finishing: (B_live, K) bool; candidates: the K best of the step, (B_live, K) each.
        history: (R, step) output tokens of this step's input rows.
        lp: (T_max + 2,) the length penalty of every number of scored positions.
        coverage_penalty: (B_live, K) cp of each candidate, added to its normalised score.
    """
    raw, tokens, parents, is_eos = candidates
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
    return Finished(
        norm=norm,
        raw=torch.where(finishing, raw, NEG_INF),
        tokens=out,
        length=length,
        step=torch.full_like(length, step),
        row=parents,
    )


def assemble(
    finished: Finished,
    step_attention: list[Tensor],
    step_parents: list[Tensor],
    src_lengths: Tensor,
) -> list[list[Hypothesis]]:
    """Finished buffers -> per-sentence hypothesis lists, with attention gathered backwards.

    Args:
        step_attention: per step t, the cross-attention of its input rows (R_t, S) or
            (R_t, L, H, S); empty when not asked for.
        step_parents: per step t, (R_{t+1},) the parent row in step t's input of every row of
            the next step.
        src_lengths: (B,) real source lengths.
    """
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
    finished: Finished,
    found: Tensor,
    step_attention: list[Tensor],
    step_parents: list[Tensor],
) -> Tensor | None:
    """Each found hypothesis's attention, following its beam's back-pointers: every step keeps
    the attention of its input rows and each next row's parent, and one walk backwards over
    the steps (vectorised over the hypotheses) picks each position's weights from its
    ancestor's row; carrying them in the state would re-index a growing history every step.

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


def gnmt_coverage_penalty(coverage: Tensor, src_mask: Tensor, beta: float) -> Tensor:
    """cp(X; Y) = beta sum_i log(min(sum_j p_ij, 1.0)) (Wu et al. 2016, eq. 14), p_ij the
    attention of output position j on real source position i, summed over the hypothesis's
    scored positions: cp <= 0 rewards outputs that attended to every source position. An
    attention of exactly zero counts as the smallest normal float, keeping the log finite.

    Args:
        coverage: (..., S) attention summed over the output positions, sum_j p_ij.
        src_mask: (..., S) bool, True at real source positions (padding adds nothing).

    Returns:
        (...) the penalty, <= 0.
    """
    covered = coverage.float().clamp(min=torch.finfo(torch.float32).tiny, max=1.0)
    return beta * (torch.log(covered) * src_mask).sum(dim=-1)


def source_attention(attention: Tensor) -> Tensor:
    """One distribution over the source per row, what the coverage penalty sums: RNN (R, S) as
    is, transformer (R, L, H, S) -> the last layer's head average (R, S), the map the
    alignment tools use too."""
    return attention if attention.dim() == 2 else attention[:, -1].mean(dim=1)


class BeamCoverage:
    """sum_j p_ij of every live row of a beam search, for the coverage penalty; reordered with
    the beams. The live beams are still chosen by raw score: cp ranks finished hypotheses only.

    Args:
        src_lengths: (B,) real source lengths of the first step's rows.
        src_len: S, the padded source length.
        beta: the penalty's weight.
    """

    def __init__(self, src_lengths: Tensor, src_len: int, beta: float) -> None:
        device = src_lengths.device
        self.beta = beta
        self.src_mask = torch.arange(src_len, device=device) < src_lengths[:, None]  # (R, S)
        self.coverage = torch.zeros(self.src_mask.shape, device=device)  # (R, S)

    def add(self, attention: Tensor | None) -> None:
        """Add one step's attention of every row, (R, S) or (R, L, H, S)."""
        if attention is None:
            raise ValueError("the coverage penalty needs a model with attention")
        self.coverage = self.coverage + source_attention(attention).float()

    def penalty(self, rows: Tensor) -> Tensor:
        """cp of hypotheses that end on these rows (any shape of row indices) -> same shape."""
        return gnmt_coverage_penalty(self.coverage[rows], self.src_mask[rows], self.beta)

    def reorder(self, rows: Tensor) -> None:
        """Follow the beams: row r of the next step continues row rows[r]."""
        self.coverage, self.src_mask = self.coverage[rows], self.src_mask[rows]


@dataclass
class _Beams:
    """The live rows of the search: R = B_live * width, the rows of one sentence contiguous.

    state: the model's decoder state of the R rows.
    prev: (R,) the token each row feeds next (BOS at the first step).
    sentences: (B_live,) the original sentence of each live sentence.
    width: beams per live sentence: one (BOS) at the first step, K afterwards.
    scores: (R,) raw scores; history: (R, t) the output tokens so far.
    """

    state: DecoderState
    prev: Tensor
    sentences: Tensor
    width: int
    scores: Tensor
    history: Tensor

    @classmethod
    def start(cls, state: DecoderState, batch: int, bos_id: int, device: torch.device) -> "_Beams":
        return cls(
            state=state,
            prev=torch.full((batch,), bos_id, dtype=torch.long, device=device),
            sentences=torch.arange(batch, device=device),
            width=1,
            scores=torch.zeros(batch, device=device),
            history=torch.empty(batch, 0, dtype=torch.long, device=device),
        )

    def advance(self, model: Seq2Seq, live: Candidates, keep: Tensor) -> Tensor:
        """Go on with the `live` beams (B_live, K) of the sentences `keep` (B_keep,).

        Returns:
            (B_keep * K,) the flat parent row of each new row, in this step's input batch.
        """
        rows = live.parents[keep].reshape(-1)  # (B_keep * K,)
        self.state = model.reorder_state(self.state, rows)
        self.history = torch.cat([self.history[rows], live.tokens[keep].reshape(-1, 1)], dim=1)
        self.scores = live.scores[keep].reshape(-1)  # (B_keep * K,)
        self.prev = self.history[:, -1]
        self.sentences = self.sentences[keep]
        self.width = live.scores.size(1)
        return rows


@dataclass
class _TrackedAttention:
    """What the search keeps of the cross-attention of every step: the steps and back-pointers
    that `assemble` traces each hypothesis's attention along (with need_weights), and the
    coverage of every live row (with a coverage penalty).

    steps: step t: (R_t, S) or (R_t, L, H, S); parents: entry t: (R_{t+1},) the parent row in
    step t's input of every row of step t + 1.
    """

    keep_steps: bool
    coverage: BeamCoverage | None
    steps: list[Tensor] = field(default_factory=list)
    parents: list[Tensor] = field(default_factory=list)

    @classmethod
    def start(
        cls, settings: DecodingConfig, src_lengths: Tensor, src_len: int, need_weights: bool
    ) -> "_TrackedAttention":
        beta = settings.coverage_penalty
        return cls(need_weights, BeamCoverage(src_lengths, src_len, beta) if beta else None)

    @property
    def needed(self) -> bool:
        """Whether the model must return its attention."""
        return self.keep_steps or self.coverage is not None

    def add(self, attention: Tensor | None) -> None:
        """Keep one step's attention of every row."""
        if self.coverage is not None:
            self.coverage.add(attention)
        if self.keep_steps and attention is not None:
            self.steps.append(attention)

    def reorder(self, rows: Tensor) -> None:
        """Follow the beams: row r of the next step continues row rows[r] of this one."""
        if self.coverage is not None:
            self.coverage.reorder(rows)
        if self.steps:
            self.parents.append(rows)

    def penalty(self, rows: Tensor) -> Tensor | None:
        """The coverage penalty of hypotheses ending on these rows (same shape); None if off."""
        return None if self.coverage is None else self.coverage.penalty(rows)


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    settings: DecodingConfig,
    need_weights: bool = False,
    **copy_inputs: Unpack[CopyInputs],
) -> list[list[Hypothesis]]:
    """Batched beam search: the K best partial hypotheses of every sentence, all live ones one
    batch of B_live * K rows (a sentence's rows contiguous) for one `decode_step`. Each step
    ranks a sentence's K * V one-token extensions by raw score sum_i log p(y_i | y_<i, x)
    (`allowed_log_probs` removes what may not come next) and takes the 2K best: EOS among the
    first K finish, the first K that are not EOS stay live. Finished hypotheses are ranked by
    the GNMT score log P(Y | X) / lp(Y) (+ cp with a coverage penalty; Wu et al. 2016,
    eq. 14), |Y| the scored positions (output tokens, plus EOS when produced). A sentence
    stops when its n-best list cannot change (`_is_done`) or at its length limit, where the K
    best candidates all finish; done sentences leave the batch.

    Args:
        src: (B, S) source ids, right-padded; src_lengths: (B,) real lengths.
        max_lengths: (B,) output limits in tokens, EOS not counted (at least 1 is used).
        settings: beam size K, length penalty alpha (and its offset), nbest, min_length,
            no_repeat_ngram, coverage penalty beta, and Hugging Face's conventions
            (stop_at_current_length, eos_at_limit, forced_first_token:
            docs/internals/decoding.md); its output
            limits are `max_lengths`' business.
        need_weights: attach each hypothesis's cross-attention (see `Hypothesis`).
        **copy_inputs: copy models: src_ext (B, S), the source in the extended vocabulary,
            and n_oov, its number of extra ids.

    Returns:
        per input sentence, up to `nbest` distinct hypotheses sorted by normalised score, best
        first (fewer only when fewer than `nbest` outputs have non-zero probability; a sentence
        where none has gets one empty hypothesis with score -inf).
    """
    k, device = settings.beam, src.device
    max_lengths = max_lengths.to(device).clamp(min=1)  # (B,)
    forced = int(settings.eos_at_limit)  # a step after the limit whose only token is EOS
    last_step = max_lengths - 1 + forced  # (B,) the step each sentence ends at, at the latest
    longest = int(max_lengths.max()) + forced
    final = last_step + 1  # (B,) scored positions of a sentence's longest hypothesis
    # lp for every |Y| in 0 .. longest + 1, looked up by index instead of recomputed per step
    lp = gnmt_length_penalty(
        torch.arange(longest + 2, device=device),
        settings.length_penalty,
        settings.length_penalty_offset,
    )
    # stopping at the current length compares with the worst of `beam` finished hypotheses
    kept = max(settings.nbest, k) if settings.stop_at_current_length else settings.nbest
    finished = Finished.empty(src.size(0), kept, longest, model.pad_id, device)
    state = start_decoding(model, src, src_lengths, copy_inputs)
    beams = _Beams.start(state, src.size(0), model.bos_id, device)
    tracked = _TrackedAttention.start(settings, src_lengths.to(device), src.size(1), need_weights)

    for step in range(longest):
        logits, attention, beams.state = model.decode_step(
            beams.prev, beams.state, need_weights=tracked.needed
        )
        tracked.add(attention)  # this step included: what finishes now has produced it
        at_limit = last_step[beams.sentences] == step  # (B_live,) its last step
        # (R,) with eos_at_limit: the rows of the sentences one position past their limit
        eos_only = at_limit.repeat_interleave(beams.width) if forced else None
        log_probs = allowed_log_probs(
            logits,
            model,
            beams.history,
            settings.min_length,
            settings.no_repeat_ngram,
            eos_only,
            settings.forced_first_token,
        )
        top = _top_candidates(beams, log_probs, k, model.eos_id)  # (B_live, 2K)
        _finish(finished, top.first(k), at_limit, beams, step, lp, tracked, model.pad_id)
        live = _live_candidates(top, k, model.eos_id)  # (B_live, K)
        done = _is_done(live, finished, beams.sentences, at_limit, final, lp, step, settings)
        keep = (~done).nonzero().squeeze(1)  # (B_keep,)
        if keep.numel() == 0:
            break
        tracked.reorder(beams.advance(model, live, keep))

    found = assemble(finished, tracked.steps, tracked.parents, src_lengths)
    return found if kept == settings.nbest else [each[: settings.nbest] for each in found]


def _finish(
    finished: Finished,
    best: Candidates,
    at_limit: Tensor,
    beams: _Beams,
    step: int,
    lp: Tensor,
    tracked: "_TrackedAttention",
    pad_id: int,
) -> None:
    """Add the candidates among the K best (`best`, (B_live, K)) that end at this step to the
    finished hypotheses: those that are EOS, and at a sentence's limit (`at_limit`, (B_live,))
    all of them (without EOS if not)."""
    finishing = (best.is_eos | at_limit.unsqueeze(1)) & torch.isfinite(best.scores)
    if not bool(finishing.any()):
        return
    # (B_live, K): the candidates share the coverage of the rows they extend
    penalty = tracked.penalty(best.parents)
    longest = finished.tokens.size(-1)
    new = finished_candidates(finishing, best, beams.history, step, lp, longest, pad_id, penalty)
    finished.merge(beams.sentences, new)


def _top_candidates(beams: _Beams, log_probs: Tensor, k: int, eos: int) -> Candidates:
    """The 2K best one-token extensions of every live sentence's beams, (B_live, 2K) each.

    Args:
        log_probs: (R, V) next-token log-probabilities of the live rows.
    """
    n_live, width, vocab = beams.sentences.numel(), beams.width, log_probs.size(-1)
    # (R, V) -> (B_live, width * V): all extensions of one sentence's beams in one row
    candidates = (beams.scores.unsqueeze(1) + log_probs).view(n_live, width * vocab)
    n_cand = min(2 * k, width * vocab)
    top_scores, top_index = candidates.topk(n_cand, dim=1)  # (B_live, C), best first
    if n_cand < 2 * k:  # tiny vocabulary: pad with impossible candidates
        filler = top_scores.new_full((n_live, 2 * k - n_cand), NEG_INF)
        top_scores = torch.cat([top_scores, filler], dim=1)  # (B_live, 2K)
        # parent 0, a token that is not EOS: it can only ever fill a dead live slot
        filler_index = torch.full_like(filler, (eos + 1) % vocab, dtype=torch.long)
        top_index = torch.cat([top_index, filler_index], dim=1)
    tokens = top_index % vocab  # (B_live, 2K)
    offsets = torch.arange(n_live, device=log_probs.device).unsqueeze(1) * width  # (B_live, 1)
    parents = top_index // vocab + offsets  # (B_live, 2K) row in this step's input
    is_eos = (tokens == eos) & torch.isfinite(top_scores)
    return Candidates(top_scores, tokens, parents, is_eos)


def _live_candidates(top: Candidates, k: int, eos: int) -> Candidates:
    """The first K of the 2K candidates in rank order that are not EOS: the beams that go on,
    (B_live, K) each, best first."""
    rank = torch.arange(2 * k, device=top.tokens.device) + (top.tokens == eos) * (2 * k)
    pick = rank.topk(k, dim=1, largest=False).indices  # (B_live, K), ascending rank
    return top.gather(pick)


def _is_done(
    live: Candidates,
    finished: Finished,
    sentences: Tensor,
    at_limit: Tensor,
    final: Tensor,
    lp: Tensor,
    step: int,
    settings: DecodingConfig,
) -> Tensor:
    """(B_live,) bool: the sentence reached its length limit, or its n-best list cannot change:
    log-probabilities are <= 0, so a live hypothesis of raw score s reaches at best s / lp(L),
    L the final length that maximises lp (its limit for alpha > 0, the next step for
    alpha < 0), and the N-th best finished hypothesis already scores at least that. (cp <= 0
    only grows as a hypothesis attends to more of the source: the bound stays one.)
    With `stop_at_current_length`, Hugging Face's rule instead: the best live beam normalised
    at its current length ranks no higher than the worst of the `beam` finished ones.

    Args:
        live: the live beams (B_live, K), best first; sentences: (B_live,) their sentences.
        at_limit: (B_live,) this was the sentence's last step; final: (B,) the scored
            positions of a sentence's longest hypothesis.
        lp: the length penalty of every number of scored positions.
    """
    n_live = sentences.numel()
    if settings.stop_at_current_length:
        lp_best = lp[step + 1].expand(n_live)  # (B_live,)
    else:
        lp_best = torch.maximum(lp[step + 2].expand(n_live), lp[final[sentences]])  # (B_live,)
    bound = live.scores[:, 0] / lp_best  # (B_live,) best reachable normalised score
    worst = finished.norm[sentences, -1]  # (B_live,) the N-th best finished, -inf if none
    return at_limit | (bound == NEG_INF) | ((worst > NEG_INF) & (bound <= worst))
