"""Decode raw text with a checkpoint: what `attnseq translate` runs. One loop, two backends:
`TextTranslator` reads, encodes, sorts, batches and formats text; a backend decodes one batch
of encoded sources (`SourceBatch`): `Translator` with attnseq's own searches over a loaded
model, `CTranslate2Translator` (decoding/ctranslate2_engine.py) with the CTranslate2 engine
over an exported folder. docs/internals/decoding.md gives the rules both keep (output order,
blank lines, n-best format, streaming, truncation, copied words).
"""

import abc
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.extended_vocab import extend_text
from attnseq.data.tokenizers import TokenizerPair
from attnseq.decoding import Hypothesis, decode, sampling_generator
from attnseq.decoding.settings import outputs_per_input, with_changes
from attnseq.errors import UserError
from attnseq.models.seq2seq import Seq2Seq

CHUNK_SIZE = 1000


class Counter(Protocol):
    """Told how many more input lines are done (e.g. `attnseq.io.progress.counting`'s counter)."""

    def advance(self, count: int) -> None: ...


@dataclass(frozen=True)
class SourceBatch:
    """One batch of encoded sources, and how to decode it.

    sources: the batch's source ids, shortest first, cut to data.max_src_len.
    extended: copy models: each source in the extended vocabulary and its out-of-vocabulary
        words (data/extended_vocab.py); empty otherwise.
    settings: the decoding settings; attention: return each hypothesis's cross-attention.
    generator: sampling draws from it (one stream for the whole input).
    """

    sources: list[list[int]]
    extended: list[tuple[list[int], list[str]]]
    settings: DecodingConfig
    attention: bool
    generator: torch.Generator | None


class TextTranslator(abc.ABC):
    """Text in, text out: the loop every backend shares (see the module docstring).

    A backend sets `tokenizers` (a `TokenizerPair`), `cfg` (the model's `TrainConfig`:
    data.max_src_len, model.copy and its decoding settings, decoding.*) and `device` (where it
    decodes, where sampling's generator lives), and implements `_decode_batch`; it refuses
    settings it cannot honour in `check`.
    """

    tokenizers: TokenizerPair
    cfg: TrainConfig
    device: torch.device

    def settings(self, **changes: object) -> DecodingConfig:
        """The model's decoding settings (its config's decoding.*) with `changes` put in
        (settings.py, `with_changes`: None keeps the model's value); UserError for a change
        that is out of range or contradicts another setting."""
        return with_changes(self.cfg.decoding, changes)

    def check(self, settings: DecodingConfig, batch_size: int) -> None:
        """UserError for a batch size below 1 (or settings this backend cannot honour). The
        settings themselves are checked where they are made (`settings`, a run's config)."""
        if batch_size < 1:
            raise UserError(f"batch size must be >= 1, got {batch_size}")

    def translate(
        self,
        lines: Iterable[str],
        settings: DecodingConfig,
        batch_size: int = 64,
        chunk_size: int = CHUNK_SIZE,
        counter: Counter | None = None,
    ) -> Iterator[str | list[str]]:
        """Output text for `lines`, one per line, in input order: a blank line (empty or only
        whitespace) gives "" without being decoded; with nbest > 1 (or num_samples > 1) a line
        gives n lines `LINE ||| HYPOTHESIS ||| SCORE` (Moses' n-best format: LINE 0-based,
        SCORE `Hypothesis.normalized_score`), a blank one `LINE |||  ||| 0.0000`. Lines are
        read `chunk_size` at a time, sorted by length within a chunk and cut into batches, so
        memory stays bounded; sources are cut to the model's data.max_src_len. `counter` is
        advanced as lines are decoded (batch by batch, blank lines included).

        Raises:
            UserError: a batch size below 1 (or settings the backend cannot honour).
        """
        for number, (hypotheses, oovs) in enumerate(
            self.nbest_lists(lines, settings, batch_size, chunk_size, False, counter)
        ):
            yield self._format(number, hypotheses, outputs_per_input(settings), oovs)

    def hypotheses(
        self,
        lines: Iterable[str],
        settings: DecodingConfig,
        batch_size: int = 64,
        chunk_size: int = CHUNK_SIZE,
        attention: bool = False,
        counter: Counter | None = None,
    ) -> Iterator[list[Hypothesis] | None]:
        """The n-best list of every line, in order; None for a blank line (not decoded).
        `attention`: each hypothesis carries its cross-attention (`Hypothesis.attention`).

        Raises:
            UserError: a batch size below 1 (or settings the backend cannot honour).
        """
        for hypotheses, _ in self.nbest_lists(
            lines, settings, batch_size, chunk_size, attention, counter
        ):
            yield hypotheses

    @abc.abstractmethod
    def _decode_batch(self, batch: SourceBatch) -> list[list[Hypothesis]]:
        """The n-best list (or samples) of each source of one batch."""

    def nbest_lists(
        self,
        lines: Iterable[str],
        settings: DecodingConfig,
        batch_size: int,
        chunk_size: int,
        attention: bool = False,
        counter: Counter | None = None,
    ) -> Iterator[tuple[list[Hypothesis] | None, list[str]]]:
        """`hypotheses`, each with the line's out-of-vocabulary source words (copy models;
        empty otherwise), which `output_text` needs to write copied words out."""
        self.check(settings, batch_size)
        iterator = iter(lines)
        generator = None
        if settings.sample:  # one stream of draws for the whole input
            generator = sampling_generator(settings.seed, self.device)
        while chunk := list(itertools.islice(iterator, chunk_size)):
            yield from self._decode_chunk(
                chunk, settings, batch_size, attention, counter, generator
            )

    def _decode_chunk(
        self,
        chunk: list[str],
        settings: DecodingConfig,
        batch_size: int,
        attention: bool,
        counter: Counter | None = None,
        generator: torch.Generator | None = None,
    ) -> list[tuple[list[Hypothesis] | None, list[str]]]:
        texts = [line.rstrip("\r\n") for line in chunk]
        limit = self.cfg.data.max_src_len
        encoded = {
            number: self.tokenizers.src.encode(text)[:limit]
            for number, text in enumerate(texts)
            if text.strip()
        }
        extended = {}  # copy models: line -> (src_ext, oovs)
        if self.cfg.model.copy:
            extended = {
                number: extend_text(texts[number], ids, self.tokenizers.src, self.tokenizers.tgt)
                for number, ids in encoded.items()
            }
        results: list[tuple[list[Hypothesis] | None, list[str]]] = [(None, [])] * len(texts)
        order = sorted(encoded, key=lambda number: len(encoded[number]))  # by source length
        if counter is not None:
            counter.advance(len(texts) - len(encoded))  # blank lines: nothing to decode
        for start in range(0, len(order), batch_size):
            numbers = order[start : start + batch_size]
            batch = SourceBatch(
                [encoded[number] for number in numbers],
                [extended[number] for number in numbers] if extended else [],
                settings,
                attention,
                generator,
            )
            nbest_lists = self._decode_batch(batch)
            for number, nbest in zip(numbers, nbest_lists, strict=True):
                results[number] = (nbest, extended[number][1] if extended else [])
            if counter is not None:
                counter.advance(len(numbers))
        return results

    def _format(
        self, line_number: int, hypotheses: list[Hypothesis] | None, nbest: int, oovs: list[str]
    ) -> str | list[str]:
        if nbest == 1:
            return "" if hypotheses is None else self.output_text(hypotheses[0], oovs)
        if hypotheses is None:
            return [f"{line_number} |||  ||| {0.0:.4f}"]
        return [
            f"{line_number} ||| {self.output_text(hypothesis, oovs)} ||| "
            f"{hypothesis.normalized_score:.4f}"
            for hypothesis in hypotheses
        ]

    def output_text(self, hypothesis: Hypothesis, oovs: list[str]) -> str:
        """The text of `hypothesis`, copied words (`oovs`) written as the source has them, on
        one line: a newline inside a hypothesis would break one output line per input line."""
        text = self.tokenizers.tgt.decode_extended(hypothesis.tokens, oovs)
        return text.replace("\n", " ")


class Translator(TextTranslator):
    """A loaded checkpoint, ready to decode text with attnseq's searches.

    Args:
        model: the model (moved to `device`, put in eval mode here).
        tokenizers: the checkpoint's `TokenizerPair`.
        cfg: the checkpoint's config.
        device: where to decode.
    """

    def __init__(
        self, model: Seq2Seq, tokenizers: TokenizerPair, cfg: TrainConfig, device: torch.device
    ) -> None:
        self.tokenizers = tokenizers
        self.cfg = cfg
        self.device = device
        self.model = model.to(device).eval()

    def _decode_batch(self, batch: SourceBatch) -> list[list[Hypothesis]]:
        src, src_lengths = self._pad(batch.sources)
        copy_inputs = {}
        if batch.extended:
            src_ext, _ = self._pad([ids for ids, _ in batch.extended])
            n_oov = max(len(oovs) for _, oovs in batch.extended)
            copy_inputs = {"src_ext": src_ext, "n_oov": n_oov}
        return decode(
            self.model,
            src,
            src_lengths,
            batch.settings,
            batch.attention,
            generator=batch.generator,
            **copy_inputs,
        )

    def _pad(self, sources: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded (B, S) ids and (B,) lengths on the device (S >= 1)."""
        width = max(1, max(len(ids) for ids in sources))
        pad = self.model.pad_id
        src = torch.tensor([ids + [pad] * (width - len(ids)) for ids in sources])  # (B, S)
        lengths = torch.tensor([len(ids) for ids in sources])  # (B,)
        return src.to(self.device), lengths.to(self.device)
