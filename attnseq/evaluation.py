"""Evaluate a model on one split: teacher-forced loss and perplexity, then decoding and the
task's metrics (translation: BLEU, chrF, exact match; summarization: ROUGE-1/2/L), and, when
the split carries gold word alignments, the AER of the model's attention (alignment.py).

Used by validation during training, by the final test evaluation and by `attnseq eval`, so all
three report the same numbers for the same model.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnseq.data.batching import TokenBatchSampler, collate
from attnseq.data.tokenizers import Tokenizer
from attnseq.decoding import DecodingSettings, Hypothesis, decode  # settings re-exported here
from attnseq.loss import sequence_loss
from attnseq.metrics import perplexity, task_metrics
from attnseq.models.seq2seq import Seq2Seq


@dataclass
class AlignmentGold:
    """Gold word links of a split, (source word, target word) 0-based, and the tokenizer kinds
    that say how pieces form words."""

    sure: list[set[tuple[int, int]]]
    possible: list[set[tuple[int, int]]]
    src_tokenizer: Tokenizer
    src_kind: str
    tgt_kind: str


class Evaluator:
    """Holds one split (encoded ids and reference text) and scores models on it.

    Args:
        examples: encoded (source ids, target ids) pairs.
        references: the target text of each example, what hypotheses are compared with.
        max_tokens: batch budget in padded tokens.
        task: "translation" or "summarization": which metrics to compute.
        gold: word alignments of the examples, to score attention with AER.
    """

    def __init__(
        self,
        examples: Sequence[tuple[list[int], list[int]]],
        references: Sequence[str],
        tgt_tokenizer: Tokenizer,
        device: torch.device,
        max_tokens: int,
        decoding: DecodingSettings,
        task: str = "translation",
        gold: AlignmentGold | None = None,
    ) -> None:
        self.examples = list(examples)
        self.references = list(references)
        self.tgt_tokenizer = tgt_tokenizer
        self.device = device
        self.decoding = decoding
        self.task = task
        self.gold = gold
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
        """The best hypothesis for every example, in the split's original order (greedy or
        beam search, as `self.decoding` says)."""
        model.eval()
        results: list[Hypothesis | None] = [None] * len(self.examples)
        for indices in self.batches:
            batch = self._batch(model, indices)
            nbest_lists = decode(
                model, batch.src, batch.src_lengths, self.decoding, need_weights=need_weights
            )
            for index, nbest in zip(indices, nbest_lists, strict=True):
                results[index] = nbest[0]
        return results  # type: ignore[return-value]

    def evaluate(self, model: Seq2Seq) -> tuple[dict[str, float], list[str]]:
        """All metrics (keys without split prefix) and the hypothesis texts in order."""
        loss = self.loss(model)
        texts = [self.tgt_tokenizer.decode(h.tokens) for h in self.decode(model)]
        metrics = {"loss": loss, "ppl": perplexity(loss)}
        metrics.update(task_metrics(self.task, texts, self.references))
        if self.gold is not None:
            metrics.update(self.alignment_metrics(model))
        return metrics, texts

    def alignment_metrics(self, model: Seq2Seq) -> dict[str, float]:
        """AER / precision / recall of argmax word alignments from the attention."""
        from attnseq.alignment import model_alignment_metrics

        gold = self.gold
        assert gold is not None
        return model_alignment_metrics(
            model,
            self.examples,
            [gold.src_tokenizer.ids_to_pieces(src) for src, _ in self.examples],
            [self.tgt_tokenizer.ids_to_pieces(tgt) for _, tgt in self.examples],
            gold.sure,
            gold.possible,
            src_kind=gold.src_kind,
            tgt_kind=gold.tgt_kind,
            device=self.device,
        )
