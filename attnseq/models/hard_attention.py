"""The models with hard attention (`model.attention.hard=gumbel|reinforce`; the choice and its
estimators are attnseq/attention/hard.py): the RNN, the transformer and the REINFORCE baseline
of the models trained by sampling. The weights they return are one-hot (k-hot) by construction;
in evaluation mode every step takes the argmax, so decoding is deterministic and a cached step
equals the teacher-forced pass.

Shapes: B batch, S source length, T target length, E encoder output size, H heads.
"""

from typing import Any

import torch
from torch import Tensor, nn

from attnseq.attention.base import AlignInputs
from attnseq.attention.hard import HardAttention, HardCrossAttention, HardSample
from attnseq.attention.mechanism import Heads, KeyValue
from attnseq.models.rnn import RNNPass, RNNSeq2Seq
from attnseq.models.seq2seq import ReinforceSample, Seq2SeqOutput, TeacherForcing, Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.models.transformer_layers import DecoderLayer, DecoderPass

# a sampling step's scratch keys in the decoder state: its sample's log-probability and entropy
_LOG_PROB, _ENTROPY = "hard_log_prob", "hard_entropy"


class MovingAverageBaseline(nn.Module):
    """The REINFORCE baseline b as a buffer (0-dim), so that checkpoints and exact resume carry
    it: NaN until the first reward arrives; the training step moves it (models/objective.py,
    `move_baseline`)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("value", torch.tensor(float("nan")))


class HardAttentionRNN(RNNSeq2Seq):
    """`RNNSeq2Seq` whose attention is a `HardAttention` around the configured score: the
    context of a step is the value of the chosen source position (the mean of k with top-k).

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
        state[_LOG_PROB], state[_ENTROPY] = sample.log_prob, sample.entropy  # (B, T)
        context = torch.bmm(sample.weights, self._values(state))  # (B, T, E)
        return context, sample.weights

    def _step(
        self, prev_tokens: Tensor, state: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        """`RNNSeq2Seq._step` on a copy of `state` that `_attend` may write its sample into;
        the new state carries the sample on under the scratch keys."""
        scratch = dict(state)
        pre_output, weights, new_state = super()._step(prev_tokens, scratch)
        for key in (_LOG_PROB, _ENTROPY):
            if key in scratch:
                new_state[key] = scratch[key]
        return pre_output, weights, new_state

    def _output(self, decoded: RNNPass, inputs: TeacherForcing) -> Seq2SeqOutput:
        """`RNNSeq2Seq._output`, with the `ReinforceSample` of the pass when it sampled: every
        step's (B, 1), or the parallel pass's (B, T), from the states `_attend` wrote into."""
        output = super()._output(decoded, inputs)
        if self._sampling():
            log_probs = [state[_LOG_PROB] for state in decoded.states if _LOG_PROB in state]
            entropies = [state[_ENTROPY] for state in decoded.states if _ENTROPY in state]
            log_prob, entropy = torch.cat(log_probs, dim=1), torch.cat(entropies, dim=1)
            output.reinforce = ReinforceSample(log_prob, entropy, self.baseline.value)
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
    """`TransformerSeq2Seq` whose every head of every decoder layer reads the value of its chosen
    source position (`HardCrossAttention`); self-attention stays soft, and the layers keep the
    soft model's parameters, names and initialisation.

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

    def decoder_pass(
        self, inputs: TeacherForcing, weights_of: int | None = None
    ) -> tuple[Seq2SeqOutput, DecoderPass, Tensor]:
        """`TransformerSeq2Seq.decoder_pass`; when reinforce samples (training mode), with the
        `ReinforceSample` of every head of every layer: (B, H, T) per layer -> (B, T), the
        log-probability of all their choices (independent given the scores)."""
        output, decoder, memory = super().decoder_pass(inputs, weights_of)
        if self.reinforce and self.training:
            samples = [out.cross_sample for out in decoder.layers]
            log_prob = sum(sample.log_prob.sum(dim=1) for sample in samples)
            entropy = sum(sample.entropy.sum(dim=1) for sample in samples)
            output.reinforce = ReinforceSample(log_prob, entropy, self.baseline.value)
        return output, decoder, memory
