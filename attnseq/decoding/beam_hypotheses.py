"""The hypotheses of a beam search (beam_search.py) as tensors: the candidates of one step, the N
best finished hypotheses of every sentence, and, at the end, the `Hypothesis` lists with each
one's attention.

Attention is gathered along back-pointers rather than carried in the search state: every step
stores the cross-attention of its input rows (R_t, S) or (R_t, L, H, S) and, for each row of the
next step, the row of its parent. A finished hypothesis records the step and row that produced its
last position; at the end, one walk backwards over the steps (vectorised over all returned
hypotheses) picks each position's weights from its ancestor's row. This copies nothing per step
(carrying would re-index a growing (R, t, ...) history every step, O(T^2) copies).

Shapes: B batch, K beam size, N = nbest, S source length, T_max the longest output limit, R rows
of a step's input batch, B_live sentences still searched, F hypotheses found.
"""

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from attnseq.decoding.settings import NEG_INF, Hypothesis


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
