"""The models with hard attention (`model.attention.hard=gumbel|reinforce`; the selection and its
estimators are attnseq/attention/hard.py): the RNN and the transformer, and the REINFORCE
baseline of the models trained by sampling.

`HardAttentionRNN` is `RNNSeq2Seq` (models/rnn.py, Bahdanau or Luong decoder) whose attention is
a `HardAttention` around the configured score: the context of every step is the value of the
chosen source position (the mean of k with top-k): its encoder annotation, or with
`model.attention.values=embeddings` its word and position alone (`WordValues`, models/rnn.py),
and the weights it returns are one-hot (k-hot) by construction. In training, gumbel passes the
straight-through gradient to the scores through the weights themselves; reinforce samples, and
`forward` also returns, for the loss, extras "hard_log_prob" and "hard_entropy" (B, T) and the
moving-average baseline "reinforce_baseline" (a buffer of the model, so checkpoints carry it).
In evaluation mode every step takes the argmax: decoding is deterministic, and a step-by-step
pass equals the teacher-forced one.

`HardAttentionTransformer` is `TransformerSeq2Seq` (models/transformer.py) whose decoder layers
attend to the memory through `HardCrossAttention`: every head of every layer reads the value of
its chosen source position (the mean of k with top-k), and its weights are one-hot (k-hot) by
construction. Self-attention is unchanged (soft). The layers keep the parameters, their names
and their initialisation of the soft model: only the attention function differs. Training:
gumbel passes the straight-through gradient through the weights; reinforce samples and
`forward` also returns extras "hard_log_prob" and "hard_entropy" (B, T), summed over the heads
and layers (the heads' choices are independent given the scores, so the log-probability of all
of them is the sum), and the baseline "reinforce_baseline". Evaluation and decoding take the
argmax: the cached incremental steps equal the teacher-forced pass.

The REINFORCE term of the models trained by sampling, its reward and the update of its baseline
are part of the training objective (models/objective.py, Xu et al. 2015, section 4.1, eq. 12);
the baseline's value lives here, in the model (`MovingAverageBaseline`), so that checkpoints and
exact resume carry it.

Shapes: B batch, S source length, T target length, E encoder output size, H decoder hidden size
(the RNN) or heads (the transformer), d_k = d_model / H.
"""

from typing import Any

import torch
from torch import Tensor, nn

from attnseq.attention.base import AlignInputs
from attnseq.attention.hard import HardAttention, HardCrossAttention, HardSample
from attnseq.attention.mechanism import Heads, KeyValue
from attnseq.models.rnn import RNNSeq2Seq
from attnseq.models.seq2seq import ALIGNMENT_ATTENTION, AlignmentHead, Seq2SeqOutput, Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.models.transformer_layers import DecoderLayer

HARD_LOG_PROB = "hard_log_prob"  # extras: (B, T) log p(s~_t | a_t), summed over heads/layers
HARD_ENTROPY = "hard_entropy"  # extras: (B, T) H(a_t), summed the same way
REINFORCE_BASELINE = "reinforce_baseline"  # extras: the model's baseline buffer (0-dim)


class MovingAverageBaseline(nn.Module):
    """The REINFORCE baseline b as a buffer (0-dim): NaN until the first reward arrives;
    models/objective.py `update_baseline` moves it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("value", torch.tensor(float("nan")))


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


class HardDecoderLayer(DecoderLayer):
    """A decoder layer whose cross-attention chooses hard; built around an existing layer,
    whose submodules (and so parameters and their names) it takes over.

    Args:
        layer: the soft layer.
        mode, k: as in `HardCrossAttention`.
    """

    def __init__(self, layer: DecoderLayer, mode: str, k: int) -> None:
        torch.nn.Module.__init__(self)
        for name, child in layer.named_children():
            self.add_module(name, child)
        self.cross_attn.mechanism = HardCrossAttention(mode, k)

    def cross_attention(
        self, h: Tensor, memory_kv: KeyValue, memory_mask: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None, HardSample]:
        """Hard attention from h (B, T, d_model): output (B, T, d_model), the k-hot weights
        (B, H, T, S) if asked, and the `HardSample` (log-probability and entropy (B, H, T)
        when reinforce samples)."""
        attention = self.cross_attn
        mechanism = attention.mechanism
        assert isinstance(mechanism, HardCrossAttention)
        q = attention.queries(h)  # (B, H, T, d_k)
        keys, values = memory_kv
        sample = mechanism.sample(Heads(q, keys, values, memory_mask))
        context = sample.weights @ values  # (B, H, T, d_k)
        output = attention.out_proj(attention._merge_heads(context))  # (B, T, d_model)
        return output, sample.weights if need_weights else None, sample


class HardAttentionTransformer(TransformerSeq2Seq):
    """`TransformerSeq2Seq` with hard cross-attention (module docstring).

    Args:
        vocab: as for `TransformerSeq2Seq`.
        hard: "gumbel" or "reinforce".
        hard_k: source positions per head and step.
        **options: every keyword argument of `TransformerSeq2Seq`.
    """

    def __init__(self, vocab: Vocabularies, *, hard: str, hard_k: int = 1, **options: Any) -> None:
        super().__init__(vocab, **options)
        layers = [HardDecoderLayer(layer, hard, hard_k) for layer in self.decoder_layers]
        self.decoder_layers = torch.nn.ModuleList(layers)
        self.reinforce = hard == "reinforce"
        if self.reinforce:
            self.baseline = MovingAverageBaseline()

    def forward(
        self,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        alignment: AlignmentHead | None = None,
    ) -> Seq2SeqOutput:
        """`TransformerSeq2Seq.forward`; when reinforce samples (training mode), extras also
        hold "hard_log_prob", "hard_entropy" (B, T) and "reinforce_baseline"."""
        layer = None if alignment is None else alignment.layer % len(self.decoder_layers)
        output, decoder, _ = self.teacher_forced(src, src_lengths, tgt_in, need_weights, layer)
        if alignment is not None and layer is not None:
            output = alignment.attach(output, decoder.layers[layer].cross_weights)
        samples = [out.cross_sample for out in decoder.layers]
        if self.reinforce and self.training:
            # (B, H, T) per layer -> (B, T): the log-probability of every head's choice
            output.extras[HARD_LOG_PROB] = sum(s.log_prob.sum(dim=1) for s in samples)
            output.extras[HARD_ENTROPY] = sum(s.entropy.sum(dim=1) for s in samples)
            output.extras[REINFORCE_BASELINE] = self.baseline.value
        return output
