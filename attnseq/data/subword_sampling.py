"""Subword regularization of the training split: each epoch every training pair is segmented anew
by sampling from its sentencepiece model (`data.spm_sampling_alpha`, unigram models, Kudo 2018;
`data.bpe_dropout`, BPE models, Provilkov et al. 2020). Pair i of epoch e draws with a generator
seeded by (seed, e, i, side) alone, so workers and resuming see the same segmentations.
"""

import logging
import random
import time
from dataclasses import dataclass

from attnseq.data.batching import Example
from attnseq.data.file_readers import Pairs
from attnseq.data.sentencepiece_tokenizer import SentencePieceTokenizer

log = logging.getLogger("attnseq")

SOURCE, TARGET = 0, 1


@dataclass
class SampledSegmentation:
    """The training split's examples resegmented per epoch.

    Args:
        src, tgt: the pair's sentencepiece tokenizers (the same object when joint).
        pairs: the training split's kept text pairs, aligned with `examples`.
        examples: their deterministic (source ids, target ids), after the length rules.
        alpha: unigram smoothing alpha, or the BPE merge-dropout probability.
        seed: the run's seed.
        max_src_len, max_tgt_len: the length limits a sampled side must keep.
    """

    src: SentencePieceTokenizer
    tgt: SentencePieceTokenizer
    pairs: Pairs
    examples: list[Example]
    alpha: float
    seed: int
    max_src_len: int
    max_tgt_len: int

    def __post_init__(self) -> None:
        if len(self.pairs) != len(self.examples):
            raise ValueError(f"{len(self.pairs)} pairs but {len(self.examples)} examples")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")

    def __len__(self) -> int:
        return len(self.examples)

    def example(self, epoch: int, index: int) -> Example:
        """Pair `index`'s segmentation in `epoch`: a pure function of (seed, epoch, index)."""
        src_text, tgt_text = self.pairs[index]
        fixed_src, fixed_tgt = self.examples[index]
        src = self._side(self.src, src_text, epoch, index, SOURCE, self.max_src_len)
        tgt = self._side(self.tgt, tgt_text, epoch, index, TARGET, self.max_tgt_len)
        return (src or fixed_src, tgt or fixed_tgt)

    def _side(
        self,
        tokenizer: SentencePieceTokenizer,
        text: str,
        epoch: int,
        index: int,
        side: int,
        limit: int,
    ) -> list[int] | None:
        rng = random.Random(f"{self.seed}/{epoch}/{index}/{side}")  # seeded by SHA-512
        ids = tokenizer.encode_sampled(text, self.alpha, rng)
        return ids if 0 < len(ids) <= limit else None

    def length_growth(self, sample: int = 500) -> tuple[float, float]:
        """(sampled tokens / deterministic tokens, microseconds per pair) over the first
        `sample` pairs of epoch 0: how much longer batches get, and what sampling costs."""
        chosen = range(min(sample, len(self)))
        if not chosen:
            return 1.0, 0.0
        start = time.perf_counter()
        sampled = [self.example(0, index) for index in chosen]
        seconds = time.perf_counter() - start
        fixed = sum(len(self.examples[i][0]) + len(self.examples[i][1]) for i in chosen)
        drawn = sum(len(src) + len(tgt) for src, tgt in sampled)
        return drawn / max(fixed, 1), seconds * 1e6 / len(chosen)


def sampled_segmentation(
    tokenizers: tuple[object, object],
    pairs: Pairs,
    examples: list[Example],
    *,
    alpha: float,
    seed: int,
    max_src_len: int,
    max_tgt_len: int,
) -> SampledSegmentation:
    """The training split's `SampledSegmentation`, with its cost logged."""
    src, tgt = tokenizers
    if not isinstance(src, SentencePieceTokenizer) or not isinstance(tgt, SentencePieceTokenizer):
        raise TypeError("subword sampling needs sentencepiece tokenizers on both sides")
    segmentation = SampledSegmentation(
        src, tgt, pairs, examples, alpha, seed, max_src_len, max_tgt_len
    )
    growth, micros = segmentation.length_growth()
    log.info(
        "subword sampling (alpha %g): training pairs resegmented every epoch; sampled "
        "segmentations are %.2fx as long as the best one (batches grow beyond data.max_tokens "
        "by that factor); %.0f us per pair",
        alpha,
        growth,
        micros,
    )
    return segmentation
