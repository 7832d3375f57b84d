"""The transformer with hard cross-attention (`model.attention.hard=gumbel|reinforce`; the
selection and its estimators are attnseq/attention/hard.py).

`HardAttentionTransformer` is `TransformerSeq2Seq` (models/transformer.py) whose decoder layers
attend to the memory through `HardCrossAttention`: every head of every layer reads the value of
its chosen source position (the mean of k with top-k), and its weights are one-hot (k-hot) by
construction. Self-attention is unchanged (soft). The layers keep the parameters, their names
and their initialisation of the soft model: only the attention function differs.

Training: gumbel passes the straight-through gradient through the weights; reinforce samples and
`forward` also returns extras "hard_log_prob" and "hard_entropy" (B, T), summed over the heads
and layers (the heads' choices are independent given the scores, so the log-probability of all
of them is the sum), and the baseline "reinforce_baseline" (models/reinforce.py). Evaluation
and decoding take the argmax: the cached incremental steps equal the teacher-forced pass.

Shapes: B batch, S source length, T target length, H heads, d_k = d_model / H.
"""

from typing import Any

import torch
from torch import Tensor

from attnseq.attention.hard import HardCrossAttention, HardSample
from attnseq.attention.mechanism import Heads, KeyValue
from attnseq.models.reinforce import (
    HARD_ENTROPY,
    HARD_LOG_PROB,
    REINFORCE_BASELINE,
    MovingAverageBaseline,
)
from attnseq.models.seq2seq import AlignmentHead, Seq2SeqOutput, Vocabularies
from attnseq.models.transformer import TransformerSeq2Seq
from attnseq.models.transformer_layers import DecoderLayer


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
        q = attention._split_heads(attention.q_proj(h))  # (B, H, T, d_k)
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
