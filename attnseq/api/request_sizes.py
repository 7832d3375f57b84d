"""The memory a request of `Model` needs, checked before the work against what its device has
free: an absurd size becomes one UserError instead of a process the kernel ends."""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnseq.alignment.attribution import GRADIENT_METHODS, GradientSettings
from attnseq.config.resources import (
    BYTES_PER_FLOAT,
    TEXT_BYTES_PER_CHARACTER,
    check_inference_memory,
    inference_bytes,
)
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.data.tokenizers import TokenizerPair

# Bytes a weight of an explanation takes at least: its float, and its text in the page's JSON
# (an integer of three decimals, the list that holds it, the page's copies of the text).
PAGE_BYTES_PER_WEIGHT = 20


@dataclass(frozen=True)
class RequestSizes:
    """The checks for one model: its config, tokenizers and the device it runs on."""

    cfg: TrainConfig
    tokenizers: TokenizerPair
    device: torch.device

    def text(self, texts: Sequence[str], name: str) -> None:
        """The memory of tokenizing `texts` at once, against the available RAM: measured before
        they are tokenized, since tokenizing a string holds it, its pieces and their ids."""
        characters = sum(len(text) for text in texts)
        check_inference_memory(
            characters * TEXT_BYTES_PER_CHARACTER,
            torch.device("cpu"),
            request=f"tokenizing {characters:,} characters of {name}",
            lower=f"the length of {name}",
        )

    def _source(self, texts: Sequence[str]) -> int:
        """Pieces of the longest of `texts` as the model reads it (cut to data.max_src_len)."""
        longest = max((len(self.tokenizers.src.encode(text)) for text in texts), default=0)
        return min(longest, self.cfg.data.max_src_len)

    def _target(self, texts: Sequence[str]) -> int:
        """Positions of the longest of `texts` as a forced target: its pieces and </s>."""
        return max((len(self.tokenizers.tgt.encode(text)) for text in texts), default=0) + 1

    def _bytes(self, rows: int, source: int, target: int, **kinds: object) -> int:
        """`inference_bytes` of a batch: a lower bound, the tensors that must exist at once (a
        size that fits may still take long: it bounds memory, not time)."""
        vocab = self.tokenizers.tgt.vocab_size
        return inference_bytes(self.cfg.model, vocab, rows, source, target, **kinds)  # type: ignore[arg-type]

    def _check(self, need: int, request: str, lower: str) -> None:
        check_inference_memory(need, self.device, request, lower)

    @staticmethod
    def steps(source: int, settings: DecodingConfig) -> int:
        """The longest output a search may produce for a `source`-piece source, and </s>."""
        return int(source * settings.max_output_ratio) + settings.max_output_extra + 1

    def decoding(
        self, texts: list[str], settings: DecodingConfig, batch_size: int, attention: bool
    ) -> None:
        """The largest batch of a decoding of `texts`: `batch_size` of the longest sources,
        each with its beam or samples, to the output limit; with `attention`, each output's
        cross-attention kept."""
        lines = [text for text in texts if text.strip()]
        self.text(texts, "lines")
        if not lines:
            return
        source = self._source(lines)
        sampled = settings.sample
        per_input = settings.num_samples if sampled else settings.beam
        rows = min(batch_size, len(lines)) * per_input
        need = self._bytes(rows, source, self.steps(source, settings), cross_maps=attention)
        what = "num_samples" if sampled else "beam"
        self._check(
            need,
            request=f"decoding {len(lines)} line(s) with {what}={per_input} and "
            f"batch_size={batch_size}",
            lower=f"{what}, batch_size or the number of lines",
        )

    def stream(self, settings: DecodingConfig, batch_size: int, chunk_size: int) -> None:
        """A decoding of lines read as they come (`attnseq translate`): their lengths are not
        known yet, so a batch is counted at `batch_size` (at most the `chunk_size` lines read
        at once) of one-piece sources, each with its beam or samples: sizes no lines could
        fit are refused, and none that some lines could."""
        sampled = settings.sample
        per_input = settings.num_samples if sampled else settings.beam
        rows = min(batch_size, chunk_size) * per_input
        what = "num_samples" if sampled else "beam"
        self._check(
            self._bytes(rows, 1, self.steps(1, settings)),
            request=f"decoding batches of {min(batch_size, chunk_size)} line(s) with "
            f"{what}={per_input}",
            lower=f"{what} or the batch size",
        )

    def scoring(self, sources: list[str], targets: list[str], max_tokens: int | None) -> None:
        """Scoring's largest batch: the pairs `max_tokens` padded tokens hold, every target
        position's scores over the vocabulary at once."""
        self.text([*sources, *targets], "src and tgt")
        scored = [i for i, text in enumerate(sources) if text.strip()]
        if not scored:
            return
        source = self._source([sources[i] for i in scored])
        target = self._target([targets[i] for i in scored])
        budget = max_tokens or self.cfg.data.eval_max_tokens
        rows = min(len(scored), max(1, budget // max(source, target)))
        self._check(
            self._bytes(rows, source, target, scored=target),
            request=f"scoring {len(scored)} pair(s) with max_tokens={budget}",
            lower="max_tokens, the number of pairs or their length",
        )

    def alignment(self, sources: list[str], targets: list[str], batch: int, method: str) -> None:
        """Forced decoding's largest batch with its weights kept; for a gradient method, the
        passes of one pair's every target step at once (a pair is never split), each over the
        whole pair, with SmoothGrad's noisy copies of the embeddings."""
        self.text([*sources, *targets], "src and tgt")
        if not sources:
            return
        source, target = self._source(sources), self._target(targets)
        if method in GRADIENT_METHODS:
            copies = GradientSettings().smoothgrad_samples if method == "smoothgrad" else 1
            model = self.cfg.model  # an RNN embeds in emb_dim, a transformer in d_model
            width = model.d_model if model.family.value == "transformer" else model.emb_dim
            embeddings = (source + target) * width * BYTES_PER_FLOAT
            need = self._bytes(target, source, target, scored=target)
            need += copies * target * embeddings
        else:
            rows = min(batch, len(sources))
            need = self._bytes(rows, source, target, scored=target, cross_maps=True, self_maps=True)
        self._check(
            need,
            request=f"aligning {len(sources)} pair(s) by {method} with batch_size={batch}",
            lower="batch_size, the number of pairs or their length",
        )

    def viewing(self, src: str, tgt: str | None) -> None:
        """One teacher-forced pass over `src` and the forced `tgt` (or the greedy output at
        its longest), every map kept."""
        self.text([src, tgt or ""], "src and tgt")
        source = self._source([src])
        target = self.steps(source, self.cfg.decoding) if tgt is None else self._target([tgt])
        need = self._bytes(1, source, target, scored=target, cross_maps=True, self_maps=True)
        self._check(need, request="the attention of one pair", lower="the length of src or tgt")

    def explanation(
        self, src: str, tgt: str | None, settings: DecodingConfig, methods: int
    ) -> None:
        """An explanation: the beam search (when it decodes), then for every output (the
        beam's, at their longest, or the forced target) a teacher-forced pass with its maps,
        each of the `methods`' weights, and their text in the page."""
        self.text([src, tgt or ""], "src and tgt")
        source = self._source([src])
        if tgt is None:
            self.decoding([src], settings, 1, True)
            outputs, target = settings.beam, self.steps(source, settings)
        else:
            outputs, target = 1, self._target([tgt])
        model = self.cfg.model
        maps = model.dec_layers * model.heads if model.family.value == "transformer" else 1
        need = self._bytes(outputs, source, target, scored=target, cross_maps=True, self_maps=True)
        need += outputs * target * source * (maps + methods) * PAGE_BYTES_PER_WEIGHT
        self._check(
            need,
            request=f"explaining {outputs} output(s) with {methods} method(s)",
            lower="beam or the number of methods",
        )
