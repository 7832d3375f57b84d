"""The RNN encoder-decoder with hard attention (`model.attention.hard=gumbel|reinforce`;
the selection and its estimators are attnseq/attention/hard.py).

`HardAttentionRNN` is `RNNSeq2Seq` (models/rnn.py, Bahdanau or Luong decoder) whose attention is
a `HardAttention` around the configured score: the context of every step is the value of the
chosen source position (the mean of k with top-k): its encoder annotation, or with
`model.attention.values=embeddings` its word and position alone (`WordValues`, models/rnn.py), and
the weights it returns are one-hot (k-hot) by construction. In training, gumbel passes the
straight-through gradient to the scores through the weights themselves; reinforce samples, and
`forward` also returns, for the loss (models/reinforce.py), extras "hard_log_prob" and
"hard_entropy" (B, T) and the moving-average baseline "reinforce_baseline" (a buffer of the
model, so checkpoints carry it). In evaluation mode every step takes the argmax: decoding is
deterministic, and a step-by-step pass equals the teacher-forced one.

Shapes: B batch, S source length, T target length, E encoder output size, H decoder hidden size.
"""

from typing import Any

import torch
from torch import Tensor

from attnseq.attention.base import AlignInputs
from attnseq.attention.hard import HardAttention
from attnseq.models.reinforce import (
    HARD_ENTROPY,
    HARD_LOG_PROB,
    REINFORCE_BASELINE,
    MovingAverageBaseline,
)
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.seq2seq import ALIGNMENT_ATTENTION, AlignmentHead, Seq2SeqOutput, Vocabularies

# a step's scratch keys: log-probability and entropy (B, T) of its reinforce sample
_SAMPLE = (HARD_LOG_PROB, HARD_ENTROPY)


class HardAttentionRNN(RNNSeq2Seq):
    """`RNNSeq2Seq` with hard attention (module docstring).

    Args:
        vocab: as for `RNNSeq2Seq`.
        hard: "gumbel" or "reinforce".
        hard_k: source positions per step.
        **options: every keyword argument of `RNNSeq2Seq`; `attention` is the score to wrap
            (a global score: no local window, no coverage).

    Raises:
        ValueError: without attention.
    """

    def __init__(self, vocab: Vocabularies, *, hard: str, hard_k: int = 1, **options: Any) -> None:
        super().__init__(vocab, **options)
        if self.attention is None:
            raise ValueError("hard attention needs an attention score, the model has none")
        self.attention = HardAttention(self.attention, hard, hard_k)
        self.reinforce = hard == "reinforce"
        if self.reinforce:
            self.baseline = MovingAverageBaseline()

    def _sampling(self) -> bool:
        """Whether this pass samples with REINFORCE (training mode) and must report it."""
        return self.reinforce and self.training

    def _attend(
        self, query: Tensor, state: dict[str, Tensor], positions: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """As `RNNSeq2Seq._attend`; when sampling, the sample's log-probability and entropy
        (B, T) go into `state` under the scratch keys (`_step` hands them on)."""
        if not self._sampling():
            return super()._attend(query, state, positions)
        assert isinstance(self.attention, HardAttention)
        mask = state["mask"].unsqueeze(1)  # (B, 1, S)
        sample = self.attention.sample(AlignInputs(query, state["keys"], mask))
        state[HARD_LOG_PROB], state[HARD_ENTROPY] = sample.log_prob, sample.entropy  # (B, T)
        context = torch.bmm(sample.weights, self._values(state))  # (B, T, E)
        return context, sample.weights

    def _step(
        self, prev_tokens: Tensor, state: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        """`RNNSeq2Seq._step` on a copy of `state` that `_attend` may write its sample into;
        the new state carries the sample on under the scratch keys."""
        scratch = dict(state)
        pre_output, weights, new_state = super()._step(prev_tokens, scratch)
        for key in _SAMPLE:
            if key in scratch:
                new_state[key] = scratch[key]
        return pre_output, weights, new_state

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        alignment: AlignmentHead | None = None,
    ) -> Seq2SeqOutput:
        """`RNNSeq2Seq.forward`; when sampling, extras also hold "hard_log_prob",
        "hard_entropy" (B, T) and "reinforce_baseline"."""
        state = self._encode(src, src_lengths)
        samples: list[tuple[Tensor, Tensor]] = []
        if self.style == "luong" and not self.input_feeding:
            pre_output, weights = self._luong_parallel(tgt_in, state)
            if HARD_LOG_PROB in state:
                samples.append((state[HARD_LOG_PROB], state[HARD_ENTROPY]))  # (B, T) each
        else:
            outputs, all_weights = [], []
            for t in range(tgt_in.size(1)):
                pre, step_weights, state = self._step(tgt_in[:, t], state)
                outputs.append(pre)
                all_weights.append(step_weights)
                if HARD_LOG_PROB in state:
                    samples.append((state.pop(HARD_LOG_PROB), state.pop(HARD_ENTROPY)))
            pre_output = torch.stack(outputs, dim=1)  # (B, T, out)
            weights = torch.stack(all_weights, dim=1)  # (B, T, S)
        logits = self.output(self.dropout(pre_output))  # (B, T, V)
        output = Seq2SeqOutput(logits=logits, attention=weights if need_weights else None)
        if alignment is not None:
            output.extras[ALIGNMENT_ATTENTION] = weights  # (B, T, S)
        if samples:
            log_probs, entropies = zip(*samples, strict=True)  # each (B, 1) or (B, T)
            output.extras[HARD_LOG_PROB] = torch.cat(log_probs, dim=1)  # (B, T)
            output.extras[HARD_ENTROPY] = torch.cat(entropies, dim=1)  # (B, T)
            output.extras[REINFORCE_BASELINE] = self.baseline.value
        return output
