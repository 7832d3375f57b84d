"""The Python API of a trained model: `attnseq.load(path)` gives a `Model` that translates,
scores and aligns sentences and shows its attention, from a notebook or a script. The commands
`translate`, `score` and `visualize-alignment` load their checkpoint through `load` and run the
same objects (`Model.translator`, `Model.scorer`, `Model.attention`, `plot_alignment`); `align`
and `Model.align` both read links with `analysis.forced_alignment.align_sentences`; `explain`
writes the page of `Model.explain`.

    import attnseq
    model = attnseq.load("outputs/DATE/TIME")          # a run directory: its checkpoints/best.pt
    result = model.translate("June 5, 2001", beam=5, n_best=2, attention=True)
    result.text, result.hypotheses[0].score, result.hypotheses[0].attention.shape
    attnseq.plot_alignment(result.hypotheses[0])       # a matplotlib Figure, inline in Jupyter
    model.score("June 5, 2001", "2001-06-05").log_prob
    model.align(["a b"], ["x y"], method="shift-att").links
    html = model.explain("June 5, 2001", beam=3, path="explain.html")   # attnseq explain's page

A single string in gives a single result out; a list of strings gives a list, in order.

Shapes. `TranslatedHypothesis.attention` is the cross-attention while the hypothesis was
produced, over the real source pieces: (T, S) for an RNN (one map) and (L, H, T, S) for a
transformer (every decoder layer and head: layer l, head h, counted from 1 as the commands'
--layer/--head are, is `attention[l - 1, h - 1]`). T is the number of output pieces, plus one for
</s> when it was produced (row t predicts output piece t); S is the number of source pieces
(`source_pieces`, after truncation to the model's data.max_src_len). An ensemble's attention is
the mean of its members'.

Threads. `load` sets torch's CPU threads as every command does: `threads`, else the cores no
other process keeps busy (attnseq/models/loading.py, `default_threads`).
"""

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import torch
from torch import Tensor

from attnseq.analysis.alignment_view import AlignmentViewer, AttentionMap, draw, merge_words
from attnseq.analysis.explain_page import explanation_html, write_page
from attnseq.analysis.explanation import explain
from attnseq.analysis.figures import style_from_options
from attnseq.analysis.forced_alignment import AlignmentMethod, ForcedAlignments, align_sentences
from attnseq.config.devices import resolve_device
from attnseq.config.schema import TrainConfig
from attnseq.data.extended_vocab import extended_pieces
from attnseq.data.tokenizers import TokenizerPair
from attnseq.decoding import DecodingSettings, Hypothesis, SamplingSettings
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.evaluation.scoring import PairScore, Scorer
from attnseq.io.user_paths import check_output_file
from attnseq.models.ensemble import load_ensemble
from attnseq.models.loading import TrainedModel, use_threads

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BEST_CHECKPOINT = Path("checkpoints") / "best.pt"  # inside a run directory


def checkpoint_file(path: str | Path) -> Path:
    """`path` itself, or RUN/checkpoints/best.pt when `path` is a run directory of
    `attnseq train`; UserError for a folder without one."""
    path = Path(path)
    if not path.is_dir():
        return path
    best = path / BEST_CHECKPOINT
    if not best.is_file():
        raise UserError(
            f"{path} is a folder without {BEST_CHECKPOINT}: pass a checkpoint file (.pt) or "
            "the run directory of a finished training"
        )
    return best


@dataclass(frozen=True)
class TranslatedHypothesis:
    """One output of `Model.translate` (module docstring: shapes).

    text: the output text. score: the length-normalised score that ranks an n-best list
    (`Hypothesis.normalized_score`). log_prob: the sum of the token log-probabilities (</s>
    included when produced). output_pieces, source_pieces: the tokens of the output and of the
    source as the model saw them. attention: (T, S) or (L, H, T, S), or None when not asked for.
    source: the input line. output_kind, source_kind: the tokenizer kinds (char, word,
    sentencepiece) of the pieces, which tell `plot_alignment(words=True)` how to merge them.
    """

    text: str
    score: float
    log_prob: float
    output_pieces: list[str]
    source_pieces: list[str]
    attention: Tensor | None = None
    source: str = ""
    output_kind: str = "char"
    source_kind: str = "char"

    def attention_map(self) -> AttentionMap:
        """The attention as `plot_alignment` and visualize-alignment draw it: rows the output
        pieces (and </s>), columns the source pieces."""
        if self.attention is None:
            raise UserError("this hypothesis has no attention: translate with attention=True")
        rows = [*self.output_pieces, "</s>"][: self.attention.shape[-2]]
        weights = self.attention.float().cpu().numpy()
        return AttentionMap(
            weights, rows, self.source_pieces, self.output_kind, self.source_kind,
            source=self.source, output=self.text,
        )  # fmt: skip


@dataclass(frozen=True)
class Translation:
    """The outputs of one input line, best first (empty for a blank line, not decoded)."""

    source: str
    hypotheses: list[TranslatedHypothesis] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The best output's text ("" for a blank line)."""
        return self.hypotheses[0].text if self.hypotheses else ""


def sampling_settings(sample: bool | SamplingSettings | Mapping[str, Any] | None):
    """`sample` as `SamplingSettings` (True: plain sampling at temperature 1; a mapping: its
    fields, e.g. {"top_p": 0.9, "num_samples": 3, "seed": 1}), or None for a search."""
    if sample is None or sample is False:
        return None
    if sample is True:
        return SamplingSettings()
    if isinstance(sample, SamplingSettings):
        return sample
    try:
        return SamplingSettings(**sample)
    except TypeError as error:
        raise UserError(f"sample: {error}") from None


class Model:
    """A trained model loaded by `load`: translate, score, align, attention maps.

    Attributes:
        cfg: the checkpoint's config (overrides applied).
        tokenizers: its source and target tokenizers.
        module: the torch model, in eval mode, on `device`.
        device: where it runs.
        path: the checkpoint file.
        ensemble: True when further checkpoints decode with it (translate only).
    """

    def __init__(self, trained: TrainedModel, device: torch.device, path: Path) -> None:
        self.trained = trained
        self.cfg: TrainConfig = trained.cfg
        self.tokenizers: TokenizerPair = trained.tokenizers
        self.device = device
        self.module = trained.model.to(device).eval()
        self.path = path
        self.ensemble = "ensemble" in trained.payload

    def __repr__(self) -> str:
        family = self.cfg.model.family.value
        return f"<attnseq.Model {family} from {self.path} on {self.device}>"

    def to(self, device: str | torch.device) -> "Model":
        """Move the model to `device` (cpu, cuda, cuda:N, mps or auto, or a torch.device) and
        return it, as torch's `Module.to` does; `device` follows. What was built for the old
        device (translator, scorer, attention viewer) is built again when next used.

        Raises:
            UserError: not a device, or one this machine lacks.
            TypeError: `device` is neither a str nor a torch.device.
        """
        self.device = resolve_device(device)
        self.module = self.module.to(self.device)
        for built in ("translator", "scorer", "_viewer"):
            self.__dict__.pop(built, None)
        return self

    @cached_property
    def translator(self) -> Translator:
        """Text in, text out (attnseq/decoding/translate.py), as `attnseq translate` runs."""
        return Translator(self.module, self.tokenizers, self.cfg, self.device)

    @cached_property
    def scorer(self) -> Scorer:
        """Teacher-forced scoring (attnseq/evaluation/scoring.py), as `attnseq score` runs."""
        self._single("score")
        return Scorer.from_trained(self.trained, self.device)

    def settings(
        self,
        beam: int | None = None,
        sample: bool | SamplingSettings | Mapping[str, Any] | None = None,
        n_best: int = 1,
        **changes: Any,
    ) -> DecodingSettings:
        """The checkpoint's decoding settings with `beam`, `n_best` and any other field of
        `DecodingSettings` (length_penalty, min_length, ...) changed; with `sample`, drawn
        at random instead (not with beam > 1 or n_best > 1: use num_samples)."""
        sampling = sampling_settings(sample)
        if sampling is not None and (beam not in (None, 1) or n_best != 1):
            raise UserError("sample draws outputs at random: leave out beam and n_best")
        try:
            settings = self.translator.settings(beam=beam, nbest=n_best, **changes)
        except TypeError as error:
            raise UserError(f"unknown decoding setting: {error}") from None
        return settings.with_sampling(sampling)

    @overload
    def translate(self, lines: str, **options: Any) -> Translation: ...
    @overload
    def translate(self, lines: Sequence[str], **options: Any) -> list[Translation]: ...
    def translate(
        self,
        lines: str | Sequence[str],
        *,
        beam: int | None = None,
        sample: bool | SamplingSettings | Mapping[str, Any] | None = None,
        n_best: int = 1,
        attention: bool = False,
        batch_size: int = 64,
        **changes: Any,
    ) -> Translation | list[Translation]:
        """Translate (or summarize) `lines`: beam search of size `beam` (default: the
        checkpoint's trainer.beam), or sampling (`sample`); `n_best` outputs per line (or
        `sample`'s num_samples), best first; `attention=True` keeps each output's
        cross-attention (module docstring: shapes). `changes`: other decoding settings, e.g.
        length_penalty=0.6. UserError for invalid settings."""
        settings = self.settings(beam, sample, n_best, **changes)
        texts = [lines] if isinstance(lines, str) else list(lines)
        results = []
        chunk = max(1, len(texts))  # one chunk: every line sorted by length together
        stream = self.translator.nbest_lists(texts, settings, batch_size, chunk, attention)
        for text, (hypotheses, oovs) in zip(texts, stream, strict=True):
            outputs = [self._hypothesis(text, each, oovs) for each in hypotheses or []]
            results.append(Translation(text, outputs))
        return results[0] if isinstance(lines, str) else results

    def _hypothesis(
        self, text: str, hypothesis: Hypothesis, oovs: list[str]
    ) -> TranslatedHypothesis:
        src, tgt = self.tokenizers.src, self.tokenizers.tgt
        source_ids = src.encode(text.rstrip("\r\n"))[: self.cfg.data.max_src_len]
        score = hypothesis.normalized_score
        return TranslatedHypothesis(
            text=self.translator.output_text(hypothesis, oovs),
            score=hypothesis.score if score is None else score,
            log_prob=hypothesis.score,
            output_pieces=extended_pieces(tgt, hypothesis.tokens, oovs),
            source_pieces=src.ids_to_pieces(source_ids),
            attention=hypothesis.attention,
            source=text,
            output_kind=type(tgt).kind,
            source_kind=type(src).kind,
        )

    @overload
    def score(self, src: str, tgt: str, *, max_tokens: int | None = None) -> PairScore: ...
    @overload
    def score(
        self, src: Sequence[str], tgt: Sequence[str], *, max_tokens: int | None = None
    ) -> list[PairScore]: ...
    def score(
        self, src: str | Sequence[str], tgt: str | Sequence[str], *, max_tokens: int | None = None
    ) -> PairScore | list[PairScore]:
        """log P(target + </s> | source) of each pair by teacher forcing (`PairScore`:
        log_prob, tokens, mean), as `attnseq score` computes it."""
        single = isinstance(src, str)
        sources = [src] if isinstance(src, str) else list(src)
        targets = [tgt] if isinstance(tgt, str) else list(tgt)
        if len(sources) != len(targets):
            raise UserError(f"{len(sources)} sources but {len(targets)} targets: give pairs")
        scores = self.scorer.score(list(zip(sources, targets, strict=True)), max_tokens)
        return scores[0] if single else scores

    def align(
        self,
        src: str | Sequence[str],
        tgt: str | Sequence[str],
        *,
        method: str = "attention",
        layer: int | None = None,
        head: int | None = None,
        batch_size: int = 64,
    ) -> ForcedAlignments:
        """Word alignments of sentence pairs by forced decoding, as `attnseq align` reads
        them: `links[i]` holds pair i's (source word, target word) links, 0-based, and
        `soft[i]` the (target words, source words) matrix they come from. `method`: one of
        `attnseq.analysis.attribution.ATTRIBUTION_METHODS` ("attention", "shift-att",
        "rollout", the gradient methods); `layer`/`head` (from 1) pick a transformer's map."""
        self._single("align")
        sources = [src] if isinstance(src, str) else list(src)
        targets = [tgt] if isinstance(tgt, str) else list(tgt)
        return align_sentences(
            self.trained, sources, targets, AlignmentMethod(method, layer, head),
            device=self.device, batch_size=batch_size,
        )  # fmt: skip

    def attention(self, src: str, tgt: str | None = None, kind: str = "cross") -> AttentionMap:
        """The `kind` attention map (cross, encoder, decoder, segment) of `src` with the
        model's greedy output, or with `tgt` forced, as visualize-alignment draws it."""
        self._single("attention")
        return self._viewer.attention(src, tgt, kind)

    def explain(
        self,
        src: str,
        tgt: str | None = None,
        *,
        beam: int | None = None,
        methods: Sequence[str] | None = None,
        layer: int | None = None,
        head: int | None = None,
        path: str | Path | None = None,
    ) -> str:
        """The self-contained HTML page of `attnseq explain` (analysis/explain_page.py) for
        `src`: every hypothesis of a beam search of size `beam` (default: the checkpoint's
        trainer.beam), or the forced target `tgt`; for each output piece the source weights
        of every method in `methods` (default: all the model has), and every attention map.
        `layer`/`head` (from 1) pick the map of the attention-based methods. Returns the page
        and, with `path`, also writes it there (atomically). UserError for an empty source, an
        empty or too long target, an unknown method, or a `path` that cannot be written."""
        self._single("explain")
        if path is not None:
            check_output_file(Path(path), "path", ["html", "htm"])
        explanation = explain(
            self.trained, src, tgt, checkpoint=str(self.path), beam=beam, methods=methods,
            layer=layer, head=head, device=self.device,
        )  # fmt: skip
        page = explanation_html(explanation)
        if path is not None:
            write_page(path, page)
        return page

    @cached_property
    def _viewer(self) -> AlignmentViewer:
        return AlignmentViewer(self.trained, self.device)

    def _single(self, what: str) -> None:
        if self.ensemble:
            raise UserError(f"{what} needs one model: load the checkpoints one by one")


def load(
    path: str | Path,
    device: str | torch.device = "auto",
    *,
    overrides: Sequence[str] | None = None,
    ensemble: Sequence[str | Path] = (),
    threads: int | None = None,
) -> Model:
    """Load a checkpoint, or the best checkpoint of a run directory.

    Args:
        path: a checkpoint file, or a run directory (its checkpoints/best.pt).
        device: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:N or mps, or a
            torch.device.
        overrides: key=value changes of the checkpoint's config, e.g. ["trainer.beam=3"].
        ensemble: more checkpoints that translate with the first as an ensemble.
        threads: torch's CPU threads (default: the cores no other process keeps busy).

    Raises:
        UserError: a missing or broken checkpoint, a bad override, members that cannot join,
            a device that is not one or that this machine lacks.
    """
    target = resolve_device(device)  # before the slow work: a typo fails fast
    use_threads(threads)
    checkpoint = checkpoint_file(path)
    members = [checkpoint, *(checkpoint_file(member) for member in ensemble)]
    trained = load_ensemble(members, list(overrides or []))
    return Model(trained, target, checkpoint)


def plot_alignment(
    attention: AttentionMap | TranslatedHypothesis,
    *,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
    words: bool = False,
    title: str | None = None,
    figsize: str | None = None,
    fontsize: float = 11.0,
    cmap: str = "viridis",
) -> "Figure":
    """A heatmap of `attention` (`Model.attention`'s map, or a hypothesis translated with
    attention=True) as a matplotlib Figure, which Jupyter shows inline: for a transformer the
    mean of the last layer's heads, or `layer`/`head` (from 1), or every layer and head
    (`all_heads`); `words` merges subword pieces into words. The figure visualize-alignment
    saves; UserError for a layer or head out of the model's range."""
    _show_figures_inline_in_ipython()
    if isinstance(attention, TranslatedHypothesis):
        attention = attention.attention_map()
    if words:
        attention = merge_words(attention)
    style = style_from_options(figsize, fontsize, cmap)
    return draw(attention, layer=layer, head=head, all_heads=all_heads, title=title, style=style)


def _show_figures_inline_in_ipython() -> None:
    """In IPython or Jupyter, display a matplotlib Figure as a PNG, as `%matplotlib inline`
    arranges for pyplot's figures: attnseq draws on plain `Figure` objects (never pyplot), which
    a kernel would otherwise show as their text repr. Does nothing outside IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    formatter = shell.display_formatter.formatters["image/png"]
    formatter.for_type(Figure, lambda figure: print_figure(figure, "png"))


__all__ = [
    "Model",
    "Translation",
    "TranslatedHypothesis",
    "checkpoint_file",
    "load",
    "plot_alignment",
]
