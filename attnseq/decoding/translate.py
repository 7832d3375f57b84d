"""Decode raw text with a checkpoint: what `attnseq translate` runs (translation, summarization,
any seq2seq checkpoint). Needs nothing but the checkpoint: config, tokenizers and weights.

One loop, two backends. `TextTranslator` reads, encodes, sorts, batches and formats text;
a backend decodes one batch of encoded sources: `Translator` with attnseq's own searches over a
loaded checkpoint (decoding/__init__.py's `decode`), `CTranslate2Translator` with the CTranslate2
engine over an exported folder (decoding/ctranslate2_engine.py). The rules below hold for both.

Input and output. One output per input line, in input order. A line that is empty or only
whitespace gives an empty output without being sent to the model (a model given an empty source
would still produce something). With nbest > 1 the output of a line is a list of n lines in the
Moses n-best format

    LINE ||| HYPOTHESIS ||| SCORE

with LINE the 0-based number of the input line and SCORE the length-normalised model score that
ranks the list (`Hypothesis.normalized_score`; with length_penalty=0 the sum of log-probs),
best first; an empty input line gives the single entry `LINE |||  ||| 0.0000`. Sampling with
num_samples > 1 writes its samples in the same format, n lines per input in the order drawn
(as OpenNMT-py's `-n_best` with random sampling and fairseq's `--nbest` with `--sampling`
list them), SCORE the length-normalised model score of the sample (decoding/sampling.py).

Streaming. Lines are read `chunk_size` at a time (1000 by default). Each chunk is sorted by
source length and cut into batches of `batch_size` sentences, so sentences of similar length
share a batch (little padding); its outputs are put back into input order and yielded before
the next chunk is read. Memory stays bounded and the first outputs appear early, whatever the
size of the input.

Sources longer than the `data.max_src_len` the model was trained with are truncated to it, as
training did for summarization.

Copy models (`model.copy`): every line gets its extended vocabulary (source words the target
vocabulary lacks, attnseq/data/extended_vocab.py), and copied words are written as the line has
them.
"""

import abc
import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import torch

from attnseq.config.devices import resolve_device
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.extended_vocab import extend_text
from attnseq.data.tokenizers import TokenizerPair
from attnseq.decoding import Hypothesis, decode, sampling_generator
from attnseq.decoding.settings import check, outputs_per_input, with_changes
from attnseq.errors import UserError
from attnseq.models.seq2seq import Seq2Seq

CHUNK_SIZE = 1000


class Counter(Protocol):
    """Told how many more input lines are done (e.g. `attnseq.io.progress.counting`'s counter)."""

    def advance(self, count: int) -> None: ...


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
        """UserError for settings out of range or a batch size below 1."""
        try:
            check(settings)
        except ValueError as error:
            raise UserError(f"invalid decoding settings: {error}") from None
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
        """Output text for `lines`, one per line, in order (see the module docstring).
        `counter` is advanced as lines are decoded (batch by batch, blank lines included).

        Raises:
            UserError: invalid settings or batch size.
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
            UserError: invalid settings or batch size.
        """
        for hypotheses, _ in self.nbest_lists(
            lines, settings, batch_size, chunk_size, attention, counter
        ):
            yield hypotheses

    @abc.abstractmethod
    def _decode_batch(
        self,
        sources: list[list[int]],
        extended: list[tuple[list[int], list[str]]],
        settings: DecodingConfig,
        attention: bool,
        generator: torch.Generator | None,
    ) -> list[list[Hypothesis]]:
        """The n-best list (or samples) of each source of one batch.

        Args:
            sources: the batch's source ids, shortest first, cut to data.max_src_len.
            extended: copy models: each source in the extended vocabulary and its
                out-of-vocabulary words (data/extended_vocab.py); empty otherwise.
            attention: return each hypothesis's cross-attention.
            generator: sampling draws from it (one stream for the whole input).
        """

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
            nbest_lists = self._decode_batch(
                [encoded[number] for number in numbers],
                [extended[number] for number in numbers] if extended else [],
                settings,
                attention,
                generator,
            )
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

    @classmethod
    def from_checkpoint(
        cls,
        path: Path,
        device: str = "auto",
        overrides: list[str] | None = None,
        ensemble: Sequence[Path] = (),
    ) -> "Translator":
        """Load a checkpoint (UserError if it is missing or not an attnseq checkpoint);
        `overrides` (key=value) change its config, e.g. its decoding settings decoding.beam=3
        (UserError if one is invalid). `ensemble`: more checkpoints that decode with it as an
        ensemble (UserError if their tokenizers or task differ from its)."""
        from attnseq.models.ensemble import load_ensemble

        trained = load_ensemble([path, *ensemble], overrides)
        return cls(trained.model, trained.tokenizers, trained.cfg, resolve_device(device))

    def _decode_batch(
        self,
        sources: list[list[int]],
        extended: list[tuple[list[int], list[str]]],
        settings: DecodingConfig,
        attention: bool,
        generator: torch.Generator | None,
    ) -> list[list[Hypothesis]]:
        src, src_lengths = self._pad(sources)
        copy_inputs = {}
        if extended:
            src_ext, _ = self._pad([ids for ids, _ in extended])
            n_oov = max(len(oovs) for _, oovs in extended)
            copy_inputs = {"src_ext": src_ext, "n_oov": n_oov}
        return decode(
            self.model, src, src_lengths, settings, attention, generator=generator, **copy_inputs
        )

    def _pad(self, sources: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded (B, S) ids and (B,) lengths on the device (S >= 1)."""
        width = max(1, max(len(ids) for ids in sources))
        pad = self.model.pad_id
        src = torch.tensor([ids + [pad] * (width - len(ids)) for ids in sources])  # (B, S)
        lengths = torch.tensor([len(ids) for ids in sources])  # (B,)
        return src.to(self.device), lengths.to(self.device)
