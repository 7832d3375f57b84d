"""Scoring given targets (`attnseq score`): the log-probability a model assigns to each (source,
target) pair by teacher forcing, as marian-scorer and fairseq's `--score-reference` report it.
For a target of n pieces y_1 .. y_n and y_{n+1} = </s>:

    log P(y | x) = sum_{t=1}^{n+1} log p(y_t | y_<t, x)        (natural log, <= 0)

and the per-token mean divides it by n + 1: EOS counts as a token, as validation counts it, so
over the same pairs sum -log P(y | x) / sum (n + 1) is eval's SPLIT/loss. How empty lines,
lengths, copy models and batches are scored: docs/internals/evaluation.md.
"""

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

import torch

from attnseq.data.batching import Example, TokenBatchSampler, collate
from attnseq.data.extended_vocab import ExtendedExample, extend_examples
from attnseq.data.tokenizers import TokenizerPair
from attnseq.data.unknown_tokens import UnknownCount, warn_unknown
from attnseq.errors import UserError
from attnseq.evaluation.metrics import perplexity
from attnseq.models.loading import TrainedModel
from attnseq.models.objective import sequence_loss
from attnseq.models.positional import position_limit
from attnseq.models.seq2seq import Seq2Seq

STREAM_CHUNK = 10_000  # pairs encoded and length-sorted together by `Scorer.score_stream`


@dataclass(frozen=True)
class PairScore:
    """The score of one pair: `log_prob` = log P(target + </s> | source) (NaN when the pair
    was not scored: an empty source) over `tokens` = target pieces + 1 (0 when not scored)."""

    log_prob: float
    tokens: int

    @property
    def mean(self) -> float:
        """Per-token mean log-probability, log_prob / tokens (NaN when not scored)."""
        return self.log_prob / self.tokens if self.tokens else math.nan

    def line(self) -> str:
        """The output line of `attnseq score`: LOG_PROB <TAB> MEAN <TAB> TOKENS."""
        return f"{self.log_prob:.6f}\t{self.mean:.6f}\t{self.tokens}"

    def __repr__(self) -> str:
        """E.g. "PairScore(log_prob=-12.3457, tokens=11, mean=-1.1223)": four decimals, the
        precision a reader compares scores by (the fields keep every bit)."""
        numbers = f"log_prob={self.log_prob:.4f}, tokens={self.tokens}, mean={self.mean:.4f}"
        return f"PairScore({numbers})"


@dataclass(frozen=True)
class ScoreSummary:
    """Totals over a file: pairs read, pairs with an empty source left unscored, tokens scored
    (EOS included), and the mean negative log-likelihood per token (nats)."""

    pairs: int
    skipped_empty: int
    tokens: int
    nll: float

    @property
    def ppl(self) -> float:
        """exp(mean NLL per token), as validation's ppl."""
        return perplexity(self.nll)

    def describe(self) -> str:
        """One line for stderr."""
        skipped = ""
        if self.skipped_empty:
            skipped = f", {self.skipped_empty} with an empty source not scored"
        return (
            f"scored {self.pairs - self.skipped_empty:,} of {self.pairs:,} pairs{skipped}; "
            f"{self.tokens:,} tokens (EOS included): mean NLL {self.nll:.4f} nats per token, "
            f"perplexity {self.ppl:.4f}"
        )


class RunningSummary:
    """`ScoreSummary` totals gathered one `PairScore` at a time (for a stream of scores)."""

    def __init__(self) -> None:
        self.pairs = self.skipped_empty = self.tokens = 0
        self.log_prob = 0.0

    def add(self, score: PairScore) -> None:
        self.pairs += 1
        if score.tokens:
            self.tokens += score.tokens
            self.log_prob += score.log_prob
        else:
            self.skipped_empty += 1

    def summary(self) -> ScoreSummary:
        """The totals so far; the NLL is token-weighted, as eval's loss."""
        nll = -self.log_prob / self.tokens if self.tokens else math.nan
        return ScoreSummary(self.pairs, self.skipped_empty, self.tokens, nll)


def summarize(scores: Iterable[PairScore]) -> ScoreSummary:
    """Totals of `scores` (`ScoreSummary`)."""
    running = RunningSummary()
    for score in scores:
        running.add(score)
    return running.summary()


@torch.no_grad()
def score_examples(
    model: Seq2Seq,
    examples: Sequence[Example],
    device: torch.device | str,
    max_tokens: int,
    max_sentences: int | None = None,
    extended: Sequence[ExtendedExample] | None = None,
) -> list[PairScore]:
    """Teacher-forced log-probability of every encoded pair, in order.

    Args:
        model: any `Seq2Seq` (put in eval mode here), on `device`.
        examples: (source ids, target ids) without BOS/EOS.
        max_tokens: batch budget in padded tokens (`TokenBatchSampler`).
        max_sentences: optional cap on the pairs per batch.
        extended: copy models: the extended-vocabulary view of every example.
    """
    model.eval()
    scored = [index for index, (src, _) in enumerate(examples) if src]
    results = [PairScore(math.nan, 0)] * len(examples)
    if not scored:
        return results
    sampler = TokenBatchSampler(
        [(len(examples[i][0]), len(examples[i][1])) for i in scored],
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        shuffle=False,
    )
    for positions in sampler.batches(0):
        indices = [scored[j] for j in positions]
        batch = collate(
            [examples[i] for i in indices],
            indices,
            pad_id=model.pad_id,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
            extended=None if extended is None else [extended[i] for i in indices],
        ).to(device)
        output = model(batch.src, batch.src_lengths, batch.tgt_in, **batch.copy_inputs())
        for row, index in enumerate(indices):  # one pair's tokens: (T, V) against (T,)
            loss, tokens = sequence_loss(output.logits[row], batch.tgt_out[row], model.pad_id)
            results[index] = PairScore(-float(loss), tokens)
    return results


class Scorer:
    """A loaded checkpoint, ready to score text pairs.

    Args:
        model: the model (moved to `device`, eval mode).
        tokenizers: the checkpoint's tokenizers; max_src_len: sources are cut to it.
        copy: the model copies (score over the extended vocabulary).
        max_tokens: default batch budget in padded tokens.
    """

    def __init__(
        self,
        model: Seq2Seq,
        tokenizers: TokenizerPair,
        device: torch.device,
        *,
        max_src_len: int,
        copy: bool,
        max_tokens: int,
    ) -> None:
        self.model = model.to(device).eval()
        self.tokenizers = tokenizers
        self.device = device
        self.max_src_len = max_src_len
        self.copy = copy
        self.max_tokens = max_tokens

    @classmethod
    def from_trained(cls, trained: TrainedModel, device: torch.device) -> "Scorer":
        """A scorer of a loaded checkpoint (`attnseq.models.loading.load_trained_model`)."""
        cfg = trained.cfg
        return cls(
            trained.model,
            trained.tokenizers,
            device,
            max_src_len=cfg.data.max_src_len,
            copy=cfg.model.copy,
            max_tokens=cfg.data.eval_max_tokens,
        )

    def encode(
        self, pairs: Sequence[tuple[str, str]], first_line: int = 1
    ) -> tuple[list[Example], list[ExtendedExample] | None]:
        """The encoded pairs (sources truncated, targets whole) and, for a copy model, their
        extended view. UserError for a target longer than the model's positions, naming its
        line (the first pair is line `first_line`)."""
        limit = position_limit(self.model)
        examples = []
        for number, (src, tgt) in enumerate(pairs, first_line):
            tgt_ids = self.tokenizers.tgt.encode(tgt)
            if limit is not None and len(tgt_ids) + 1 > limit:
                raise UserError(
                    f"target line {number} has {len(tgt_ids)} tokens; this model takes at most "
                    f"{limit - 1} (model.max_positions={limit}, one for BOS)"
                )
            examples.append((self.tokenizers.src.encode(src)[: self.max_src_len], tgt_ids))
        if not self.copy:
            return examples, None
        return examples, extend_examples(pairs, examples, self.tokenizers.src, self.tokenizers.tgt)

    def score(
        self,
        pairs: Sequence[tuple[str, str]],
        max_tokens: int | None = None,
        max_sentences: int | None = None,
    ) -> list[PairScore]:
        """The `PairScore` of every (source text, target text) pair, in order (module
        docstring); `max_tokens` defaults to the checkpoint's data.eval_max_tokens."""
        return list(self.score_stream(pairs, max_tokens, max_sentences, chunk=max(1, len(pairs))))

    def score_stream(
        self,
        pairs: Iterable[tuple[str, str]],
        max_tokens: int | None = None,
        max_sentences: int | None = None,
        chunk: int | None = None,
    ) -> Iterator[PairScore]:
        """`score` of pairs read lazily, `chunk` pairs (default `STREAM_CHUNK`) at a time: the
        scores come in input order, each chunk's as soon as it is scored. After the last, one
        warning line on stderr if most source or target tokens were unknown to the model
        (attnseq/data/unknown_tokens.py)."""
        if (max_tokens is not None and max_tokens < 1) or (
            max_sentences is not None and max_sentences < 1
        ):
            raise UserError("the batch budget and batch size must be >= 1")
        pairs = iter(pairs)
        first_line = 1
        unknown = [
            UnknownCount(side, f"the model's {side} vocabulary", tokenizer.unk_id)
            for side, tokenizer in (
                ("source", self.tokenizers.src),
                ("target", self.tokenizers.tgt),
            )
        ]
        while block := list(islice(pairs, chunk or STREAM_CHUNK)):
            examples, extended = self.encode(block, first_line)
            unknown[0].add_all(src for src, _ in examples)
            unknown[1].add_all(tgt for _, tgt in examples)
            yield from self._score_block(examples, extended, max_tokens, max_sentences)
            first_line += len(block)
        warn_unknown(unknown)

    def _score_block(
        self,
        examples: list[Example],
        extended: list[ExtendedExample] | None,
        max_tokens: int | None,
        max_sentences: int | None,
    ) -> list[PairScore]:
        return score_examples(
            self.model,
            examples,
            self.device,
            max_tokens or self.max_tokens,
            max_sentences,
            extended,
        )
