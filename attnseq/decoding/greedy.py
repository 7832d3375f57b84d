"""Greedy decoding, and the token-by-token loop it shares with sampling (`token_by_token`): one
`decode_step` over the live rows per step; a row that produced EOS or reached its length limit
leaves the batch (`reorder_state` keeps the others).

Shapes: B batch, S source length, T_max the longest output limit + 1, B_live rows still decoding.
"""

from collections.abc import Callable
from typing import Unpack

import torch
from torch import Tensor

from attnseq.decoding.settings import Hypothesis, allowed_log_probs, start_decoding
from attnseq.models.seq2seq import CopyInputs, Seq2Seq

Choose = Callable[[Tensor], Tensor]  # (R_live, V) log-probabilities -> (R_live,) next tokens


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    need_weights: bool = False,
    *,
    eos_at_limit: bool = False,
    first_token: int | None = None,
    **copy_inputs: Unpack[CopyInputs],
) -> list[Hypothesis]:
    """Pick the most probable token at every step.

    Args:
        src: (B, S) source ids; src_lengths: (B,); max_lengths: (B,) output limits (tokens,
            EOS not counted).
        need_weights: collect the cross-attention of every step for each hypothesis.
        eos_at_limit: a row that reaches its limit takes one more step, whose only token is
            EOS (`DecodingConfig.eos_at_limit`).
        first_token: the id every output starts with (`DecodingConfig.forced_first_token`).
        **copy_inputs: copy models: src_ext (B, S), the source in the extended vocabulary, and
            n_oov, its number of extra ids.
    """
    return token_by_token(
        model,
        src,
        src_lengths,
        max_lengths,
        most_probable,
        need_weights,
        copy_inputs,
        eos_at_limit=eos_at_limit,
        first_token=first_token,
    )


def most_probable(log_probs: Tensor) -> Tensor:
    """Greedy's choice: the most probable token of every row, (R, V) -> (R,)."""
    return log_probs.max(dim=-1).indices


def token_by_token(
    model: Seq2Seq,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: Tensor,
    choose: Choose,
    need_weights: bool,
    copy_inputs: CopyInputs,
    min_length: int = 0,
    no_repeat_ngram: int = 0,
    eos_at_limit: bool = False,
    first_token: int | None = None,
) -> list[Hypothesis]:
    """One hypothesis per row of src (B, S): at every step `choose` picks each live row's next
    token from its allowed log-probabilities (`allowed_log_probs` with `min_length` and
    `no_repeat_ngram`), which the hypothesis's score sums. Greedy decoding chooses the argmax,
    sampling draws. With `eos_at_limit` a row that reaches its limit takes one more step,
    whose only token is EOS (`DecodingConfig.eos_at_limit`); `first_token` is every output's
    first token, when given."""
    batch_size, device = src.size(0), src.device
    max_lengths = max_lengths.to(device)
    longest = int(max_lengths.max())
    state = start_decoding(model, src, src_lengths, copy_inputs)
    prev = torch.full((batch_size,), model.bos_id, dtype=torch.long, device=device)
    active = torch.arange(batch_size, device=device)  # original row of each live row
    out = torch.full((batch_size, longest + 1), model.eos_id, dtype=torch.long, device=device)
    scores = torch.zeros(batch_size, device=device)
    step_weights: list[tuple[Tensor, Tensor]] = []  # (rows, weights) per step
    for step in range(longest + 1):
        logits, attention, state = model.decode_step(prev, state, need_weights=need_weights)
        history = out[active, :step]  # (B_live, step)
        # with eos_at_limit, the rows one position past their limit may only end
        eos_only = max_lengths[active] == step if eos_at_limit else None  # (B_live,)
        log_probs = allowed_log_probs(
            logits, model, history, min_length, no_repeat_ngram, eos_only, first_token
        )
        chosen = choose(log_probs)  # (B_live,)
        out[active, step] = chosen
        scores[active] += log_probs.gather(1, chosen.unsqueeze(1)).squeeze(1)
        if need_weights and attention is not None:
            step_weights.append((active, attention))
        keep = (chosen != model.eos_id) & (max_lengths[active] + int(eos_at_limit) > step + 1)
        if not bool(keep.all()):
            keep_index = keep.nonzero().squeeze(1)
            active, chosen = active[keep_index], chosen[keep_index]
            if active.numel() == 0:
                break
            state = model.reorder_state(state, keep_index)
        prev = chosen
    return _collect_hypotheses(out, scores, step_weights, src_lengths, max_lengths, model.eos_id)


def _collect_hypotheses(
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
