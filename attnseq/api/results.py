"""What `Model.translate` and `Model.explain` return: one-line reprs, and HTML a notebook shows."""

import base64
import html
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnseq.analysis.alignment_view import AttentionMap, draw
from attnseq.analysis.explain_page import page_frame
from attnseq.analysis.figures import figure_png
from attnseq.data.tokenizers import Tokenizer
from attnseq.errors import UserError


@dataclass(frozen=True)
class TranslatedHypothesis:
    """One output of `Model.translate`.

    text: the output text. score: the length-normalised score that ranks an n-best list
    (`Hypothesis.normalized_score`). log_prob: the sum of the token log-probabilities (</s>
    included when produced). output_pieces, source_pieces: the tokens of the output and of the
    source as the model saw them (the source cut to data.max_src_len). attention: the
    cross-attention while it was produced, (T, S) for an RNN and (L, H, T, S) for a transformer
    (layer l, head h, counted from 1 as the commands' are, is `attention[l - 1, h - 1]`), an
    ensemble's the mean of its members'; T the output pieces, plus one for </s> when it was
    produced (row t predicts output piece t), S the source pieces; None when not asked for.
    source: the input line. output_kind, source_kind: the tokenizer kinds (char, word,
    sentencepiece) of the pieces, which tell `plot_alignment(words=True)` how to merge them.
    output_ids: (T,) int64 on the CPU, the output's target ids without BOS and EOS, one per
    output piece (a copy model's ids >= the vocabulary size are source words it copied); not
    compared by ==, which compares the pieces.

    Its repr is one line (text, scores, sizes, the attention's shape), and a notebook shows
    the attention as a heatmap below it (`_repr_html_`).
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
    output_ids: Tensor | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        words = [
            f"text={_short(self.text)}",
            f"score={self.score:.4f}",
            f"log_prob={self.log_prob:.4f}",
            f"{_counted(len(self.output_pieces), 'output piece')} from {len(self.source_pieces)}",
        ]
        return _one_line("TranslatedHypothesis", words, self.attention)

    def _repr_html_(self) -> str | None:
        """The repr over the attention's heatmap (what `plot_alignment` draws); None without
        attention, and a notebook shows the repr alone."""
        if self.attention is None:
            return None
        return heatmap_html(repr(self), self.attention_map())

    def attention_map(self) -> AttentionMap:
        """The attention as `plot_alignment` and visualize-alignment draw it: rows the output
        pieces (and </s>), columns the source pieces."""
        if self.attention is None:
            raise UserError("this hypothesis has no attention: translate with attention=True")
        rows = [*self.output_pieces, "</s>"][: self.attention.shape[-2]]
        weights = self.attention.float().cpu().numpy()
        return AttentionMap(
            weights,
            rows=rows,
            columns=self.source_pieces,
            row_kind=self.output_kind,
            column_kind=self.source_kind,
            source=self.source,
            output=self.text,
        )


@dataclass(frozen=True)
class Translation:
    """The outputs of one input line, best first (empty for a blank line, not decoded). Its
    repr is one line; a notebook shows the best output's attention as a heatmap."""

    source: str
    hypotheses: list[TranslatedHypothesis] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The best output's text ("" for a blank line)."""
        return self.hypotheses[0].text if self.hypotheses else ""

    @property
    def output_ids(self) -> Tensor:
        """(N, T) int64: the ids of the N outputs, best first (`TranslatedHypothesis.output_ids`),
        padded at the end with the pad id to the longest, T; (0, 0) for a blank line."""
        ids = [hypothesis.output_ids for hypothesis in self.hypotheses]
        present = [each for each in ids if each is not None]
        if len(present) != len(ids):
            raise UserError("these outputs hold no ids: they are not from Model.translate")
        if not present:
            return torch.zeros(0, 0, dtype=torch.long)
        return torch.nn.utils.rnn.pad_sequence(present, batch_first=True, padding_value=PAD)

    @property
    def scores(self) -> Tensor:
        """(N,) float64: the outputs' scores (`TranslatedHypothesis.score`), best first."""
        return torch.tensor(
            [hypothesis.score for hypothesis in self.hypotheses], dtype=torch.float64
        )

    def __repr__(self) -> str:
        if not self.hypotheses:
            return f"Translation(source={_short(self.source)}, no outputs: a blank line)"
        best = self.hypotheses[0]
        words = [
            f"text={_short(self.text)}",
            f"source={_short(self.source)}",
            _counted(len(self.hypotheses), "output"),
            f"best score={best.score:.4f}",
        ]
        return _one_line("Translation", words, best.attention)

    def _repr_html_(self) -> str | None:
        """The repr over the best output's attention heatmap; None without attention."""
        if not self.hypotheses or self.hypotheses[0].attention is None:
            return None
        return heatmap_html(repr(self), self.hypotheses[0].attention_map())


REPR_TEXT = 60  # characters of a text that a result's repr shows
PAD = Tokenizer.pad_id  # what pads the shorter outputs in `Translation.output_ids`


def _short(text: str, limit: int = REPR_TEXT) -> str:
    """The repr of `text`, cut to `limit` characters with "…" when longer."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _counted(count: int, noun: str) -> str:
    """ "1 output", "2 outputs"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _one_line(kind: str, words: list[str], attention: Tensor | None) -> str:
    """A result's repr: `kind(words)`, with the attention's shape last when there is one."""
    if attention is not None:
        words = [*words, f"attention {tuple(attention.shape)}"]
    return f"{kind}({', '.join(words)})"


def heatmap_html(caption: str, attention: AttentionMap) -> str:
    """`caption` over the heatmap `plot_alignment` draws of `attention` by default, as an
    <img> of a PNG inlined in base64 (drawn by the Agg canvas, analysis/figures.py)."""
    png = base64.b64encode(figure_png(draw(attention))).decode("ascii")
    alt = html.escape(f"attention: {attention.title()}", quote=True)
    return (
        f"<div><pre>{html.escape(caption)}</pre>"
        f'<img src="data:image/png;base64,{png}" alt="{alt}"></div>'
    )


class ExplanationPage(str):
    """The HTML page `Model.explain` returns: a str, the page as `attnseq explain` writes it,
    whose repr is one line and which a notebook shows inline in a frame of its own (its
    styles and script reach nothing of the notebook: analysis/explain_page.py, `page_frame`).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<attnseq explain page: {len(self):,} characters of HTML>"

    def _repr_html_(self) -> str:
        return page_frame(str(self))
