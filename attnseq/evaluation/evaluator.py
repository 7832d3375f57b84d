"""Evaluate a model on one split: teacher-forced loss and perplexity, then decoding and the
task's metrics, and the AER of its attention when the split carries gold word alignments.
Validation, the final test evaluation and `attnseq eval` all build it with `make_evaluator`, so
they report the same numbers for the same model (docs/internals/evaluation.md).
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnseq.alignment.diagnostics import AttentionDiagnostics
from attnseq.config.choices import DataSource
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.batching import Batch, TokenBatchSampler, collate
from attnseq.data.extended_vocab import ExtendedExample, extend_examples
from attnseq.data.generated import gold_alignments
from attnseq.data.prepare import PreparedData
from attnseq.data.tokenizers import Tokenizer, TokenizerPair
from attnseq.decoding import Hypothesis, decode, sampling_generator  # re-exported here
from attnseq.evaluation.metrics import perplexity, task_metrics
from attnseq.io.progress import Rate, counting
from attnseq.models.objective import sequence_loss
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
        extended: copy models: the extended-vocabulary view of every example.
        label: the split's name; when given, decoding shows a progress bar on a terminal.
            Either way `decode_rate` holds the sentences and seconds of the latest decoding.
    """

    def __init__(
        self,
        examples: Sequence[tuple[list[int], list[int]]],
        references: Sequence[str],
        tgt_tokenizer: Tokenizer,
        device: torch.device,
        max_tokens: int,
        decoding: DecodingConfig,
        task: str = "translation",
        gold: AlignmentGold | None = None,
        extended: Sequence[ExtendedExample] | None = None,
        label: str | None = None,
    ) -> None:
        self.examples = list(examples)
        self.label = label
        self.decode_rate = Rate()
        self.last_texts: list[str] = []  # the outputs of the latest `evaluate`, in order
        self.extended = None if extended is None else list(extended)
        self.references = list(references)
        self.tgt_tokenizer = tgt_tokenizer
        self.device = device
        self.decoding = decoding
        self.task = task
        self.gold = gold
        # The empty-example rule: a source with no tokens is never given to the model (its
        # hypothesis is the empty line, so outputs stay line-aligned with the input); an
        # example with an empty source or target is left out of the loss and the metrics.
        decodable = [i for i, (src, _) in enumerate(self.examples) if src]
        self.scored = [i for i in decodable if self.examples[i][1]]
        self.skipped_empty = len(self.examples) - len(self.scored)
        sampler = TokenBatchSampler(
            [(len(self.examples[i][0]), len(self.examples[i][1])) for i in decodable],
            max_tokens=max_tokens,
            shuffle=False,
            seed=0,
        )
        self.batches = [[decodable[j] for j in batch] for batch in sampler.batches(0)]

    def _batch(self, model: Seq2Seq, indices: list[int]) -> Batch:
        return collate(
            [self.examples[i] for i in indices],
            indices,
            pad_id=model.pad_id,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
            extended=None if self.extended is None else [self.extended[i] for i in indices],
        ).to(self.device)

    @torch.no_grad()
    def loss(self, model: Seq2Seq) -> float:
        """Mean token negative log-likelihood (no label smoothing)."""
        return self.teacher_forced(model)["loss"]

    @torch.no_grad()
    def teacher_forced(self, model: Seq2Seq) -> dict[str, float]:
        """Mean token NLL ("loss"), and for copy/coverage models the means over the real
        target positions of p_gen ("p_gen_mean") and the coverage loss ("coverage_loss")."""
        model.eval()
        total, tokens = 0.0, 0
        extras: dict[str, float] = {}
        for batch in self._scored_batches(model):
            output = model(batch.src, batch.src_lengths, batch.tgt_in, **batch.copy_inputs())
            loss_sum, n_tokens = sequence_loss(output.logits, batch.tgt_out, model.pad_id)
            total += float(loss_sum)
            tokens += n_tokens
            for name, values in (
                ("p_gen_mean", output.p_gen),
                ("coverage_loss", output.coverage_loss),
            ):
                if values is not None:  # (B, T), summed over the real target positions
                    real = batch.tgt_out != model.pad_id
                    extras[name] = extras.get(name, 0.0) + float(values[real].sum())
        results = {"loss": total / max(tokens, 1)}
        results.update({name: value / max(tokens, 1) for name, value in extras.items()})
        return results

    def scored_batches(self, model: Seq2Seq) -> list[Batch]:
        """The batches the loss is taken over, on the device (head importance reads them)."""
        return list(self._scored_batches(model))

    def _scored_batches(self, model: Seq2Seq) -> Iterator[Batch]:
        """The batches of the scored examples (non-empty source and target), on the device."""
        for batch_indices in self.batches:
            indices = [i for i in batch_indices if self.examples[i][1]]
            if indices:
                yield self._batch(model, indices)

    @torch.no_grad()
    def attention_diagnostics(self, model: Seq2Seq) -> dict[str, float]:
        """End-of-source attention mass and per-head entropy, teacher-forced on the scored
        examples (attnseq/alignment/diagnostics.py: keys ``attention/...``); {} for a
        model without cross-attention."""
        if not model.has_attention:
            return {}
        model.eval()
        diagnostics = AttentionDiagnostics()
        for batch in self._scored_batches(model):
            output = model(
                batch.src, batch.src_lengths, batch.tgt_in, need_weights=True, **batch.copy_inputs()
            )
            if output.attention is None:
                return {}
            diagnostics.add(output.attention, batch.src_lengths, batch.tgt_lengths)
        return diagnostics.results()

    @torch.no_grad()
    def decode(self, model: Seq2Seq, need_weights: bool = False) -> list[Hypothesis]:
        """The best hypothesis for every example, in the split's original order (greedy, beam
        search or the first sample, as `self.decoding` says; samples are drawn from one
        generator seeded once per call)."""
        model.eval()
        settings = self.decoding
        generator = sampling_generator(settings.seed, self.device) if settings.sample else None
        # An empty source has nothing to condition on: no output, as beam search reports it.
        results: list[Hypothesis | None] = [
            None if src else Hypothesis([], float("-inf")) for src, _ in self.examples
        ]
        label = self.label or "decode"
        with counting(label, len(self.examples), enabled=self.label is not None) as counter:
            for indices in self.batches:
                batch = self._batch(model, indices)
                nbest_lists = decode(
                    model,
                    batch.src,
                    batch.src_lengths,
                    self.decoding,
                    need_weights=need_weights,
                    generator=generator,
                    **batch.copy_inputs(),
                )
                for index, nbest in zip(indices, nbest_lists, strict=True):
                    results[index] = nbest[0]
                counter.advance(len(indices))
        self.decode_rate = counter.rate
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def output_p_gen(
        self, model: Seq2Seq, hypotheses: Sequence[Hypothesis]
    ) -> list[np.ndarray] | None:
        """p_gen of every output position (+ EOS) of the decoded hypotheses of this split, from
        one teacher-forced pass over each (which computes what decoding did, tests/models);
        None for a model that does not copy."""
        if self.extended is None:
            return None
        values = []
        for (src_ids, _), view, hypothesis in zip(
            self.examples, self.extended, hypotheses, strict=True
        ):
            src = torch.tensor([src_ids or [model.pad_id]], device=self.device)  # (1, S)
            lengths = torch.tensor([len(src_ids)], device=self.device)  # (1,)
            src_ext = torch.tensor([view.src_ext or [model.pad_id]], device=self.device)
            tgt_in = torch.tensor([[model.bos_id, *hypothesis.tokens]], device=self.device)
            output = model(src, lengths, tgt_in, src_ext=src_ext, n_oov=len(view.oovs))
            assert output.p_gen is not None
            values.append(output.p_gen[0].cpu().numpy())  # (T,)
        return values

    def oovs(self, index: int) -> list[str]:
        """Example `index`'s out-of-vocabulary source words (copy models; [] otherwise)."""
        return [] if self.extended is None else self.extended[index].oovs

    def texts(self, hypotheses: Sequence[Hypothesis]) -> list[str]:
        """Detokenized outputs of the split's examples, in order (copied out-of-vocabulary
        words written as the source has them)."""
        if self.extended is None:
            return [self.tgt_tokenizer.decode(h.tokens) for h in hypotheses]
        return [
            self.tgt_tokenizer.decode_extended(h.tokens, self.oovs(index))
            for index, h in enumerate(hypotheses)
        ]

    def evaluate(self, model: Seq2Seq) -> tuple[dict[str, float], list[str]]:
        """All metrics (keys without split prefix) and the hypothesis texts in order."""
        metrics, hypotheses = self.evaluate_hypotheses(model)
        return metrics, self.texts(hypotheses)

    def evaluate_hypotheses(
        self, model: Seq2Seq, need_weights: bool = False
    ) -> tuple[dict[str, float], list[Hypothesis]]:
        """`evaluate`, returning the hypotheses themselves (in the split's order).

        With `need_weights` every hypothesis carries the cross-attention of its own decoding
        (`Hypothesis.attention`); the metrics are those of these very hypotheses, so saved
        attention always belongs to the output that was scored.
        """
        forced = self.teacher_forced(model)
        hypotheses = self.decode(model, need_weights=need_weights)
        texts = self.texts(hypotheses)
        self.last_texts = texts
        metrics = {"loss": forced["loss"], "ppl": perplexity(forced["loss"])}
        metrics.update({key: value for key, value in forced.items() if key != "loss"})
        metrics.update(
            task_metrics(
                self.task,
                [texts[i] for i in self.scored],
                [self.references[i] for i in self.scored],
            )
        )
        if self.gold is not None and model.has_attention:  # score=none has no alignment
            metrics.update(self.alignment_metrics(model))
        if self.skipped_empty:
            metrics["skipped_empty"] = self.skipped_empty
        return metrics, hypotheses

    def alignment_metrics(self, model: Seq2Seq) -> dict[str, float]:
        """AER / precision / recall of argmax word alignments from the attention."""
        from attnseq.alignment.forced import model_alignment_metrics
        from attnseq.data.word_alignments import word_ids

        gold = self.gold
        assert gold is not None
        pieces = {
            i: (
                gold.src_tokenizer.ids_to_pieces(self.examples[i][0]),
                self.tgt_tokenizer.ids_to_pieces(self.examples[i][1]),
            )
            for i in self.scored
        }

        def whole(i: int) -> bool:
            # the gold links the whole pair; an example cut to data.max_src_len/max_tgt_len
            # has fewer words than they name, and is left out of the alignment scores
            n_src = max(word_ids(pieces[i][0], gold.src_kind), default=-1) + 1
            n_tgt = max(word_ids(pieces[i][1], gold.tgt_kind), default=-1) + 1
            links = gold.sure[i] | gold.possible[i]
            return all(s < n_src and t < n_tgt for s, t in links)

        kept = [i for i in self.scored if whole(i)]
        if not kept:
            return {}
        return model_alignment_metrics(
            model,
            [self.examples[i] for i in kept],
            [pieces[i][0] for i in kept],
            [pieces[i][1] for i in kept],
            [gold.sure[i] for i in kept],
            [gold.possible[i] for i in kept],
            src_kind=gold.src_kind,
            tgt_kind=gold.tgt_kind,
            device=self.device,
        )


# --------------------------------------------------------------------- the splits of a config


def make_evaluator(
    cfg: TrainConfig,
    data: PreparedData,
    split: str,
    device: torch.device,
    gold: AlignmentGold | None = None,
) -> Evaluator:
    """The evaluator of one prepared split (`gold`: score the attention against it too)."""
    return Evaluator(
        data.examples[split],
        [tgt for _, tgt in data.pairs[split]],
        data.tokenizers.tgt,
        device,
        max_tokens=cfg.data.eval_max_tokens,
        decoding=cfg.decoding,
        task=cfg.data.task.value,
        gold=gold,
        extended=extended_split(cfg, data, split),
        label=split,
    )


def extended_split(
    cfg: TrainConfig, data: PreparedData, split: str
) -> list[ExtendedExample] | None:
    """A copy model's extended-vocabulary view of a split's examples (None without copy)."""
    if not cfg.model.copy:
        return None
    tokenizers = data.tokenizers
    return extend_examples(data.pairs[split], data.examples[split], tokenizers.src, tokenizers.tgt)


def split_gold(cfg: TrainConfig, split: str, tokenizers: TokenizerPair) -> AlignmentGold | None:
    """Gold word alignments of a generated split, when the task has them."""
    if cfg.data.source is not DataSource.generated:
        return None
    sizes = {"train": cfg.data.train_size, "valid": cfg.data.valid_size, "test": cfg.data.test_size}
    gold = gold_alignments(
        cfg.data.name,
        sizes,
        cfg.seed,
        min_len=cfg.data.min_len,
        max_len=cfg.data.max_len,
        vocab_size=cfg.data.vocab_size,
    )
    if gold is None or split not in gold:
        return None
    links = gold[split]
    return AlignmentGold(
        sure=links,
        possible=links,
        src_tokenizer=tokenizers.src,
        src_kind=type(tokenizers.src).kind,
        tgt_kind=type(tokenizers.tgt).kind,
    )
