"""Search for the output sequence: greedy decoding over the `Seq2Seq` step interface.

Both families decode incrementally (`start_decoding` once, then `decode_step` per token: the RNN
carries its hidden state, the transformer its key/value cache). Finished rows are dropped from
the batch as soon as they emit EOS, so a long run-away hypothesis does not keep the whole batch
busy computing rows that are already done.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from attnseq.models.seq2seq import Seq2Seq


@dataclass
class Hypothesis:
    """One decoded output.

    tokens: target ids without BOS and EOS.
    score: sum of the token log-probabilities (EOS included when it was produced).
    attention: cross-attention while producing it, (T_out, S) for RNNs or (L, H, T_out, S) for
        transformers, over the real source positions only; None if not requested.
    """

    tokens: list[int]
    score: float
    attention: Tensor | None = None


def max_output_lengths(src_lengths: Tensor, ratio: float, extra: int) -> Tensor:
    """Per-sentence output limit: ratio * source length + extra, as a (B,) long tensor."""
    return (src_lengths.float() * ratio).long() + extra


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    need_weights: bool = False,
) -> list[Hypothesis]:
    """Pick the most probable token at every step.

    Args:
        src: (B, S) source ids; src_lengths: (B,); max_lengths: (B,) output limits (tokens,
            EOS not counted).
        need_weights: collect the cross-attention of every step for each hypothesis.
    """
    batch_size, device = src.size(0), src.device
    max_lengths = max_lengths.to(device)
    longest = int(max_lengths.max())
    state = model.start_decoding(src, src_lengths)
    prev = torch.full((batch_size,), model.bos_id, dtype=torch.long, device=device)
    active = torch.arange(batch_size, device=device)  # original row of each live row
    out = torch.full((batch_size, longest + 1), model.eos_id, dtype=torch.long, device=device)
    scores = torch.zeros(batch_size, device=device)
    step_weights: list[tuple[Tensor, Tensor]] = []  # (rows, weights) per step
    for step in range(longest + 1):
        logits, attention, state = model.decode_step(prev, state, need_weights=need_weights)
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (B_live, V)
        best_scores, best = log_probs.max(dim=-1)  # (B_live,)
        out[active, step] = best
        scores[active] += best_scores
        if need_weights and attention is not None:
            step_weights.append((active, attention))
        keep = (best != model.eos_id) & (max_lengths[active] > step + 1)
        if not bool(keep.all()):
            keep_index = keep.nonzero().squeeze(1)
            active, best = active[keep_index], best[keep_index]
            if active.numel() == 0:
                break
            state = model.reorder_state(state, keep_index)
        prev = best
    return _collect(out, scores, step_weights, src_lengths, max_lengths, model.eos_id)


def _collect(
    out: Tensor,
    scores: Tensor,
    step_weights: list[tuple[Tensor, Tensor]],
    src_lengths: Tensor,
    max_lengths: Tensor,
    eos_id: int,
) -> list[Hypothesis]:
    """Turn the (B, T_max) token table into hypotheses, cut at EOS or at each row's limit."""
    hypotheses = []
    rows = out.tolist()
    for row, (ids, limit) in enumerate(zip(rows, max_lengths.tolist(), strict=True)):
        ids = ids[:limit] if eos_id not in ids[: limit + 1] else ids[: ids.index(eos_id)]
        attention = None
        if step_weights:
            steps = [
                w[(r == row).nonzero().squeeze(1)] for r, w in step_weights if (r == row).any()
            ]
            attention = _stack_attention([s.squeeze(0) for s in steps], int(src_lengths[row]))
        hypotheses.append(Hypothesis(tokens=ids, score=float(scores[row]), attention=attention))
    return hypotheses


def _stack_attention(steps: list[Tensor], src_length: int) -> Tensor | None:
    """Per-step weights (S,) or (L, H, S) -> (T_out, S) or (L, H, T_out, S), real source only."""
    if not steps:
        return None
    stacked = torch.stack(steps, dim=-2)  # (..., T_out, S)
    return stacked[..., :src_length].cpu()
