"""Evaluate a model on one split: teacher-forced loss and perplexity, then decoding and the
task's metrics (translation: BLEU, chrF, exact match).

Used by validation during training, by the final test evaluation and by `attnseq eval`, so all
three report the same numbers for the same model.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnseq.data.batching import TokenBatchSampler, collate
from attnseq.data.tokenizers import Tokenizer
from attnseq.decoding import Hypothesis, greedy_decode, max_output_lengths
from attnseq.loss import sequence_loss
from attnseq.metrics import perplexity, translation_metrics
from attnseq.models.seq2seq import Seq2Seq


@dataclass
class DecodingSettings:
    beam: int = 1
    max_output_ratio: float = 1.5
    max_output_extra: int = 10


class Evaluator:
    """Holds one split (encoded ids and reference text) and scores models on it.

    Args:
        examples: encoded (source ids, target ids) pairs.
        references: the target text of each example, what hypotheses are compared with.
        max_tokens: batch budget in padded tokens.
    """

    def __init__(
        self,
        examples: Sequence[tuple[list[int], list[int]]],
        references: Sequence[str],
        tgt_tokenizer: Tokenizer,
        device: torch.device,
        max_tokens: int,
        decoding: DecodingSettings,
    ) -> None:
        self.examples = list(examples)
        self.references = list(references)
        self.tgt_tokenizer = tgt_tokenizer
        self.device = device
        self.decoding = decoding
        sampler = TokenBatchSampler(
            [(len(src), len(tgt)) for src, tgt in self.examples],
            max_tokens=max_tokens,
            shuffle=False,
            seed=0,
        )
        self.batches = sampler.batches(0)

    def _batch(self, model: Seq2Seq, indices: list[int]):
        return collate(
            [self.examples[i] for i in indices],
            indices,
            pad_id=model.pad_id,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
        ).to(self.device)

    @torch.no_grad()
    def loss(self, model: Seq2Seq) -> float:
        """Mean token negative log-likelihood (no label smoothing)."""
        model.eval()
        total, tokens = 0.0, 0
        for indices in self.batches:
            batch = self._batch(model, indices)
            output = model(batch.src, batch.src_lengths, batch.tgt_in)
            loss_sum, n_tokens = sequence_loss(output.logits, batch.tgt_out, model.pad_id)
            total += float(loss_sum)
            tokens += n_tokens
        return total / max(tokens, 1)

    @torch.no_grad()
    def decode(self, model: Seq2Seq, need_weights: bool = False) -> list[Hypothesis]:
        """Hypotheses for every example, in the split's original order."""
        model.eval()
        results: list[Hypothesis | None] = [None] * len(self.examples)
        for indices in self.batches:
            batch = self._batch(model, indices)
            limits = max_output_lengths(
                batch.src_lengths, self.decoding.max_output_ratio, self.decoding.max_output_extra
            )
            hypotheses = greedy_decode(
                model, batch.src, batch.src_lengths, limits, need_weights=need_weights
            )
            for index, hypothesis in zip(indices, hypotheses, strict=True):
                results[index] = hypothesis
        return results  # type: ignore[return-value]

    def evaluate(self, model: Seq2Seq) -> tuple[dict[str, float], list[str]]:
        """All metrics (keys without split prefix) and the hypothesis texts in order."""
        loss = self.loss(model)
        texts = [self.tgt_tokenizer.decode(h.tokens) for h in self.decode(model)]
        metrics = {"loss": loss, "ppl": perplexity(loss)}
        metrics.update(translation_metrics(texts, self.references))
        return metrics, texts
