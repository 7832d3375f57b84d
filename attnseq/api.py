"""The Python API of a trained model: `attnseq.load(path)` gives a `Model` that translates,
scores and aligns sentences and shows its attention, from a notebook or a script. The commands
`translate`, `score` and `visualize-alignment` load their checkpoint through `load` and run the
same objects (`Model.translator`, `Model.scorer`, `Model.attention`, `plot_alignment`); `align`
and `Model.align` both read links with `alignment.forced.align_sentences`; `explain`
writes the page of `Model.explain`.

    import attnseq
    model = attnseq.load("outputs/DATE/TIME")          # a run directory: its checkpoints/best.pt
    result = model.translate("June 5, 2001", beam=5, nbest=2, attention=True)
    result.text, result.hypotheses[0].score, result.hypotheses[0].attention.shape
    attnseq.plot_alignment(result.hypotheses[0])       # a matplotlib Figure, inline in Jupyter
    model.score("June 5, 2001", "2001-06-05").log_prob
    model.align(["a b"], ["x y"], method="shift-att").links
    html = model.explain("June 5, 2001", beam=3, path="explain.html")   # attnseq explain's page

A single string in gives a single result out; a list of strings gives a list, in order.

Results in a notebook. Every result's repr is one line (texts cut, scores to four decimals,
shapes, never a tensor); a translation with attention shows its heatmap inline
(`_repr_html_`: a PNG of the figure `plot_alignment` draws) and the page of `Model.explain`
shows inline in a frame of its own. `Model.save` writes the model back as a checkpoint that
`load` and the commands read: config, tokenizers and weights, without the state of training.

Shapes. `TranslatedHypothesis.attention` is the cross-attention while the hypothesis was
produced, over the real source pieces: (T, S) for an RNN (one map) and (L, H, T, S) for a
transformer (every decoder layer and head: layer l, head h, counted from 1 as the commands'
--layer/--head are, is `attention[l - 1, h - 1]`). T is the number of output pieces, plus one for
</s> when it was produced (row t predicts output piece t); S is the number of source pieces
(`source_pieces`, after truncation to the model's data.max_src_len). An ensemble's attention is
the mean of its members'.

Threads. `load(threads=...)` chooses torch's CPU threads for the model's computations: a
number, "auto" (the cores no other process keeps busy, measured at each call) or None (the
default: torch's count as this process has it, untouched). A count is set around each call
(translate, score, align, attention, explain) and the caller's count is put back after it
(attnseq/models/loading.py, `threads_set`): loading a model never changes the process's threads
for good.

Arguments. Every function checks its arguments before any work, as the command line checks its
options (attnseq/evaluation/arguments.py): a wrong type raises TypeError naming the argument and
what it takes; a bad value raises `attnseq.UserError` in Python's words (`beam=0: must be >= 1`);
the decoding settings are the fields of the checkpoint's `DecodingConfig` by name, checked
against the types and bounds the schema declares for them; sizes (beam, nbest, samples,
batch_size, the text's length) go through the memory estimate
(attnseq/evaluation/request_sizes.py) against the memory of the model's device, so
`translate(..., beam=10**9)` is one UserError instead of a process the kernel ends.

Training. `attnseq.train(overrides=[...])` runs one training from Python, composed from the
packaged config exactly as `attnseq train OVERRIDES` composes it, in this process, and returns
the run directory and the test metrics. Hydra's compose API composes the config once (Hydra is
imported only then); `check_run` (attnseq/training/composition.py, the checks `attnseq train`
runs in its Hydra callback) validates it, checks the resources and the data and creates the
time-stamped run directory (or checks the one given); then `run_training` trains. What
`hydra.main` adds on the command line (multirun, launchers, sweepers, `--cfg`) is left out: a
sweep is refused here, run it with `attnseq train -m`. The run directory gets what `attnseq
train` leaves there: train.log (the "attnseq" logger's lines, in Hydra's log format),
.hydra/config.yaml and .hydra/overrides.yaml, besides what training writes. A training that
refuses to start (a UserError before it wrote any output) removes the run directory the call
created, and the folders above it that it created, so a refusal leaves nothing behind. What
training sets for the whole process is put back to the caller's when the call returns or
raises: torch's CPU thread count (trainer.threads), the TF32 switches (trainer.tf32) and the
random-number states (seed).

What the caller sees while it trains: with `verbose` the "attnseq" logger's lines (validation
results, the periodic training lines) reach the caller's stderr (a notebook cell's output)
unless the caller's logging shows them already, and the summary is printed at the end; with
`progress` (by default: in a notebook or on a terminal) a bar shows the updates with loss and
ETA (attnseq/io/progress.py). `callbacks` (attnseq/training/callbacks.py) hear of each update,
validation and the end, and may end the run early. A Ctrl-C raises `TrainingInterrupted` (a
KeyboardInterrupt) whose message is the `attnseq.train(...)` call that resumes the run.
"""

import base64
import dataclasses
import html
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints, overload

import numpy as np
import torch
from torch import Tensor

from attnseq.alignment.attribution import canonical_method, check_method_fits
from attnseq.alignment.forced import AlignmentMethod, ForcedAlignments, align_sentences
from attnseq.alignment.segments import is_hierarchical
from attnseq.alignment.word_links import check_layer_and_head
from attnseq.analysis.alignment_view import (
    KINDS,
    AlignmentViewer,
    AttentionMap,
    draw,
    merge_words,
)
from attnseq.analysis.explain_page import explanation_html, page_frame, write_page
from attnseq.analysis.explanation import available_methods, explain
from attnseq.analysis.figures import figure_png, style_from_options
from attnseq.config.devices import resolve_device
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.config.threads import check_threads
from attnseq.data.extended_vocab import extended_pieces
from attnseq.data.tokenizers import Tokenizer, TokenizerPair
from attnseq.data.unknown_tokens import UnknownCount
from attnseq.decoding import Hypothesis
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.evaluation import arguments
from attnseq.evaluation.request_sizes import RequestSizes
from attnseq.evaluation.scoring import PairScore, Scorer
from attnseq.io.checkpoint import save_checkpoint
from attnseq.io.progress import in_notebook
from attnseq.io.user_paths import check_output_file
from attnseq.models.ensemble import load_ensemble
from attnseq.models.head_mask import optional_entry
from attnseq.models.loading import TrainedModel, load_weights, model_for, threads_set
from attnseq.models.positional import position_limit
from attnseq.training.averaging import HEADER_KEYS, RUN_STATE_KEYS
from attnseq.training.callbacks import Callback, check_callbacks
from attnseq.training.run_directory import run_outputs
from attnseq.training.stopping import TrainingInterrupted

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from omegaconf import DictConfig

    from attnseq.analysis.comparison import Comparison
    from attnseq.analysis.seed_comparison import SeedComparison

BEST_CHECKPOINT = Path("checkpoints") / "best.pt"  # inside a run directory


def checkpoint_file(path: str | Path) -> Path:
    """`path` itself (also a Hugging Face model folder, with its config.json), or
    RUN/checkpoints/best.pt when `path` is a run directory of `attnseq train`; UserError for
    a folder without either."""
    path = Path(path)
    if not path.is_dir():
        return path
    best = path / BEST_CHECKPOINT
    if not best.is_file() and (path / "config.json").is_file():
        return path  # read by models/pretrained.py
    if not best.is_file():
        raise UserError(
            f"{path} is a folder without {BEST_CHECKPOINT}: pass a checkpoint file (.pt), "
            "the run directory of a finished training or a Hugging Face model folder"
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
        pieces = len(self.output_pieces)
        words = [
            f"text={_short(self.text)}",
            f"score={self.score:.4f}",
            f"log_prob={self.log_prob:.4f}",
            f"{pieces} output piece{'' if pieces == 1 else 's'} from {len(self.source_pieces)}",
        ]
        if self.attention is not None:
            words.append(f"attention {tuple(self.attention.shape)}")
        return f"TranslatedHypothesis({', '.join(words)})"

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
            weights, rows, self.source_pieces, self.output_kind, self.source_kind,
            source=self.source, output=self.text,
        )  # fmt: skip


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
        best, count = self.hypotheses[0], len(self.hypotheses)
        words = [
            f"text={_short(self.text)}",
            f"source={_short(self.source)}",
            f"{count} output{'' if count == 1 else 's'}",
            f"best score={best.score:.4f}",
        ]
        if best.attention is not None:
            words.append(f"attention {tuple(best.attention.shape)}")
        return f"Translation({', '.join(words)})"

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


# The decoding settings `translate` and `settings` take: the fields of DecodingConfig by name,
# each checked against its field's type and the bounds the schema declares (schema.py).
DECODING_SETTINGS = {spec.name: spec for spec in dataclasses.fields(DecodingConfig)}
_DECODING_TYPES = get_type_hints(DecodingConfig)
# The longest output a decoding may be allowed (max_output_ratio x source + max_output_extra):
# far beyond any sentence or summary, and short enough that a search that never ends its
# outputs stops within minutes rather than days.
MAX_OUTPUT_TOKENS = 100_000


def decoding_setting(name: str, value: object) -> object:
    """`value` checked as the decoding setting `name` (a field of DecodingConfig; None keeps
    the model's setting): TypeError unless it is of the field's type, UserError outside the
    bounds the field declares (e.g. temperature >= 1e-06, top_p in (0, 1])."""
    if value is None:
        return None
    kind, bounds = _DECODING_TYPES[name], DECODING_SETTINGS[name].metadata
    if kind is bool:
        return arguments.flag(value, name)
    if kind is int:
        low, high = bounds.get("ge"), bounds.get("le")
        return arguments.integer(value, name, low=low, high=high, optional=True)
    low, above, high = bounds.get("ge"), bounds.get("gt"), bounds.get("le")
    return arguments.number(value, name, low=low, above=above, high=high, optional=True)


class Model:
    """A trained model loaded by `load`: translate, score, align, attention maps; `save`
    writes it back as a checkpoint.

    Attributes:
        config: the checkpoint's `TrainConfig`, overrides applied (also as `cfg`).
        decoding: the decoding settings `translate` uses where a call changes none
            (`config.decoding`, a `DecodingConfig`).
        tokenizers: its source and target tokenizers (a `TokenizerPair`: `.src`, `.tgt`).
        module: the torch model (`torch.nn.Module`), in eval mode, on `device`.
        device: where it runs (a `torch.device`; `to` moves it).
        path: the checkpoint file it was loaded from.
        trained: what `load` read (attnseq/models/loading.py): model, config, tokenizers and
            the checkpoint's payload.
        ensemble: True when further checkpoints decode with it (translate only).
        threads: torch's CPU threads for its computations (an int, "auto", or None: the
            caller's count; module docstring).
    """

    def __init__(
        self,
        trained: TrainedModel,
        device: torch.device,
        path: Path,
        threads: int | str | None = None,
    ) -> None:
        self.trained = trained
        self.cfg: TrainConfig = trained.cfg
        self.tokenizers: TokenizerPair = trained.tokenizers
        self.device = device
        self.module = trained.model.to(device).eval()
        self.path = path
        self.ensemble = "ensemble" in trained.payload
        self.threads = threads

    def __repr__(self) -> str:
        """One line, e.g. "<attnseq.Model transformer, 1,234,567 parameters, vocabularies
        8000/8000 (source/target), on cpu, from run/checkpoints/best.pt>"."""
        family = self.cfg.model.family.value
        if self.ensemble:
            family = f"ensemble of {len(self.trained.payload['ensemble'])} {family}"
        parameters = sum(parameter.numel() for parameter in self.module.parameters())
        sizes = f"{self.tokenizers.src.vocab_size}/{self.tokenizers.tgt.vocab_size}"
        return (
            f"<attnseq.Model {family}, {parameters:,} parameters, vocabularies {sizes} "
            f"(source/target), on {self.device}, from {self.path}>"
        )

    @property
    def config(self) -> TrainConfig:
        """The checkpoint's config with the overrides of `load` (the object `cfg` names)."""
        return self.cfg

    @property
    def decoding(self) -> DecodingConfig:
        """The decoding settings `translate` uses where a call changes none: the config's
        decoding.* (`config.decoding`). A call's keywords change them for that call only."""
        return self.cfg.decoding

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
        for built in ("translator", "scorer", "viewer"):
            self.__dict__.pop(built, None)
        return self

    def save(self, path: str | Path) -> Path:
        """Write the model as a self-contained checkpoint at `path` (a .pt file), which
        `attnseq.load` and every command (eval, translate, visualize-alignment, ...) read: its
        config (`config`: the overrides of `load` and any change since), tokenizers, the
        module's weights as they are now (head masks included) and the records of what was
        done to them (a pruning's head_pruning, an average's averaged_from). The state of a
        training (optimizer, scheduler, progress, random-number state) is left out: the file
        is a model to use, not a run to resume. The write is atomic (attnseq/io/atomic.py):
        `path` holds the old file or the whole new one, never a part. Returns `path`.

        Saving over the checkpoint the model was loaded from is allowed when it loses nothing:
        a file without training state (an average, a pruned or a saved model) is replaced by
        the model it now is; one with training state is refused, since its run could no
        longer be resumed from it.

        Raises:
            TypeError: `path` is not a str or path.
            UserError: an ensemble (no one set of weights computes it), a `path` that cannot
                be written or is no .pt file, weights that no longer fit the config (heads
                removed from the weights), or the training checkpoint it was loaded from.
        """
        target = arguments.path(path, "path")
        assert target is not None
        if self.ensemble:
            raise UserError(
                "an ensemble cannot be saved as one checkpoint: it decodes with the mean of its "
                "members' probabilities, which no one set of weights computes; save a member "
                "loaded alone, or average the checkpoints of one run (attnseq average)"
            )
        check_output_file(target, "path", ["pt"])
        self._refuse_losing_training_state(target)
        state = {name: value.detach().cpu() for name, value in self.module.state_dict().items()}
        load_weights(target, model_for(self.cfg, self.tokenizers), state)  # as `load` will
        save_checkpoint(target, self._saved_payload(state))
        return target

    def _refuse_losing_training_state(self, target: Path) -> None:
        """UserError when `target` is the checkpoint this model was loaded from (by any path)
        and that checkpoint holds training state, which `save` leaves out."""
        try:
            same = os.path.samefile(target, self.path)
        except OSError:  # one of them does not exist
            return
        lost = [key for key in self.trained.payload if key in RUN_STATE_KEYS]
        if same and lost:
            raise UserError(
                f"path {target} is the checkpoint this model was loaded from, and it holds the "
                f"state of its training ({', '.join(lost)}), which a saved model leaves out: "
                "saving over it would lose the means to resume the run; save to another path"
            )

    def _saved_payload(self, state: dict[str, Tensor]) -> dict[str, Any]:
        """What `save` writes: the loaded payload's records of the model without the state of
        training and the file header, and the config, tokenizers and weights of now."""
        from attnseq.config.conversion import config_to_dict

        loaded = self.trained.payload
        payload = {
            key: value
            for key, value in loaded.items()
            if key not in RUN_STATE_KEYS and key not in HEADER_KEYS
        }
        if "head_pruning" in payload and not _same_head_masks(loaded["model"], state):
            del payload["head_pruning"]  # it names the heads of masks the model no longer has
        payload.update(
            config=config_to_dict(self.cfg), tokenizers=self.tokenizers.state(), model=state
        )
        return payload

    @cached_property
    def translator(self) -> Translator:
        """Text in, text out (attnseq/decoding/translate.py), as `attnseq translate` runs."""
        return Translator(self.module, self.tokenizers, self.cfg, self.device)

    @cached_property
    def scorer(self) -> Scorer:
        """Teacher-forced scoring (attnseq/evaluation/scoring.py), as `attnseq score` runs."""
        self._single("score")
        return Scorer.from_trained(self.trained, self.device)

    def settings(self, **changes: Any) -> DecodingConfig:
        """The checkpoint's decoding settings (its decoding.*) with `changes`: any setting of
        `DecodingConfig` by its name (beam, nbest, length_penalty, max_output_ratio,
        max_output_extra, min_length, no_repeat_ngram, coverage_penalty; sample=True with
        temperature, top_k, top_p, num_samples, seed), None keeping the checkpoint's. With
        sample=True the outputs are drawn at random (beam and nbest stay 1: use num_samples).

        Raises:
            TypeError: a setting `DecodingConfig` lacks, or a value of the wrong type.
            UserError: a value outside its bounds, nbest above the beam, sample with a beam,
                a sampling setting without sample=True, or an output limit beyond
                `MAX_OUTPUT_TOKENS` or the model's positions.
        """
        arguments.keywords(changes, DECODING_SETTINGS, "the decoding settings")
        checked = {name: decoding_setting(name, value) for name, value in changes.items()}
        given = {name: value for name, value in checked.items() if value is not None}
        self._check_output_limit(dataclasses.replace(self.cfg.decoding, **given))
        return self.translator.settings(**checked)

    def _check_output_limit(self, settings: DecodingConfig) -> None:
        """UserError when outputs of the longest source the model reads could run past
        `MAX_OUTPUT_TOKENS`, or past the positions of a model with learned ones."""
        longest, ratio = self.cfg.data.max_src_len, settings.max_output_ratio
        given = f"max_output_ratio={ratio:g} and max_output_extra={settings.max_output_extra}"
        reach = longest * ratio + settings.max_output_extra  # a float: ratio may be 1e300
        if not reach <= MAX_OUTPUT_TOKENS:
            raise UserError(
                f"{given} let outputs of a {longest}-piece source reach {reach:.4g} pieces; at "
                f"most {MAX_OUTPUT_TOKENS} are allowed"
            )
        limit = int(longest * ratio) + settings.max_output_extra
        positions = position_limit(self.module)
        if positions is not None and limit + 1 > positions:
            raise UserError(
                f"{given} let outputs of a {longest}-piece source reach {limit} pieces; this "
                f"model has {positions} positions (BOS included)"
            )

    @overload
    def translate(self, lines: str, **options: Any) -> Translation: ...
    @overload
    def translate(self, lines: Iterable[str], **options: Any) -> list[Translation]: ...
    def translate(
        self,
        lines: str | Iterable[str],
        *,
        attention: bool = False,
        batch_size: int = 64,
        **changes: Any,
    ) -> Translation | list[Translation]:
        """Translate (or summarize) `lines` with the checkpoint's decoding settings (its
        decoding.*) and `changes` of them by name (`settings`): e.g. beam=5, nbest=2,
        length_penalty=0.6, or sample=True with top_p=0.9, num_samples=3; nbest outputs per
        line (or num_samples), best first. `attention=True` keeps each output's
        cross-attention (module docstring: shapes). TypeError for an argument of the wrong
        type; UserError for invalid settings or a request larger than the device's memory."""
        texts, single = arguments.texts(lines, "lines")
        settings = self.settings(**changes)
        arguments.flag(attention, "attention")
        batch_size = arguments.integer(batch_size, "batch_size", low=1)  # type: ignore[assignment]
        self.sizes.decoding(texts, settings, batch_size, attention)
        self._warn_unknown(texts)
        results = []
        chunk = max(1, len(texts))  # one chunk: every line sorted by length together
        with threads_set(self.threads):
            stream = self.translator.nbest_lists(texts, settings, batch_size, chunk, attention)
            for text, (hypotheses, oovs) in zip(texts, stream, strict=True):
                outputs = [self._hypothesis(text, each, oovs) for each in hypotheses or []]
                results.append(Translation(text, outputs))
        return results[0] if single else results

    def _warn_unknown(self, texts: list[str]) -> None:
        """One warning (`warnings.warn`) when the source vocabulary lacks pieces of `texts`:
        how many of the source pieces the model reads as <unk>, and which (attnseq/data/
        unknown_tokens.py counts them); the output cannot render what the model cannot read."""
        tokenizer = self.tokenizers.src
        count = UnknownCount("source", "the model's source vocabulary", tokenizer.unk_id)
        unknown: dict[str, None] = {}  # the pieces in order of appearance, each once
        for text in texts:
            line = text.rstrip("\r\n")
            ids, pieces = tokenizer.encode(line), tokenizer.pieces(line)
            count.add(ids)
            pairs = zip(pieces, ids, strict=False)
            unknown.update(dict.fromkeys(piece for piece, id_ in pairs if id_ == tokenizer.unk_id))
        if not count.unknown:
            return
        named = ", ".join(repr(piece) for piece in list(unknown)[:UNKNOWN_NAMED])
        if len(unknown) > UNKNOWN_NAMED:
            named += f", ... ({len(unknown)} different)"
        warnings.warn(
            f"{count.describe()}: the model reads them as <unk>, so the output leaves them out "
            f"or guesses: {named}",
            UserWarning,
            stacklevel=3,  # the caller's line of translate
        )

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
            output_ids=torch.tensor(hypothesis.tokens, dtype=torch.long),
        )

    def _pairs(self, src: object, tgt: object) -> tuple[list[str], list[str], bool]:
        """(sources, targets, whether one pair was given) of `src` and `tgt`: both a str, or
        both iterables of str of one length."""
        sources, single = arguments.texts(src, "src")
        targets, single_target = arguments.texts(tgt, "tgt")
        if single != single_target:
            raise TypeError(
                "src and tgt must both be a str (one pair) or both lists of str (pairs), not "
                f"{type(src).__name__} and {type(tgt).__name__}"
            )
        if len(sources) != len(targets):
            raise UserError(f"{len(sources)} sources but {len(targets)} targets: give pairs")
        return sources, targets, single

    @overload
    def score(self, src: str, tgt: str, *, max_tokens: int | None = None) -> PairScore: ...
    @overload
    def score(
        self, src: Iterable[str], tgt: Iterable[str], *, max_tokens: int | None = None
    ) -> list[PairScore]: ...
    def score(
        self, src: str | Iterable[str], tgt: str | Iterable[str], *, max_tokens: int | None = None
    ) -> PairScore | list[PairScore]:
        """log P(target + </s> | source) of each pair by teacher forcing (`PairScore`:
        log_prob, tokens, mean), as `attnseq score` computes it; batches of at most
        `max_tokens` padded tokens (default: the checkpoint's data.eval_max_tokens). In a list,
        a pair with an empty source is not scored (log_prob NaN, 0 tokens), as the command
        writes it; a single pair with an empty source is a UserError. TypeError for an
        argument of the wrong type."""
        sources, targets, single = self._pairs(src, tgt)
        max_tokens = arguments.integer(max_tokens, "max_tokens", low=1, optional=True)
        if single and not sources[0].strip():
            raise UserError("src is empty: a score is of a target given a source sentence")
        self.sizes.scoring(sources, targets, max_tokens)
        with threads_set(self.threads):
            scores = self.scorer.score(list(zip(sources, targets, strict=True)), max_tokens)
        return scores[0] if single else scores

    def align(
        self,
        src: str | Iterable[str],
        tgt: str | Iterable[str],
        *,
        method: str = "attention",
        layer: int | None = None,
        head: int | None = None,
        batch_size: int = 64,
    ) -> ForcedAlignments:
        """Word alignments of sentence pairs by forced decoding, as `attnseq align` reads
        them: `links[i]` holds pair i's (source word, target word) links, 0-based, and
        `soft[i]` the (target words, source words) matrix they come from. `method`: one of
        `attnseq.alignment.attribution.ATTRIBUTION_METHODS` ("attention", "shift-att",
        "rollout", the gradient methods); `layer`/`head` (from 1) pick a transformer's map.
        TypeError for an argument of the wrong type; UserError for a value the model cannot
        take."""
        self._single("align")
        sources, targets, _ = self._pairs(src, tgt)
        if not isinstance(method, str):
            raise TypeError(f"method must be a str, e.g. 'attention', not {type(method).__name__}")
        layer = arguments.integer(layer, "layer", optional=True)
        head = arguments.integer(head, "head", optional=True)
        batch_size = arguments.integer(batch_size, "batch_size", low=1)  # type: ignore[assignment]
        name = canonical_method(method, "method")
        check_method_fits(self.trained, name, layer, head, ("method", "layer", "head"))
        self.sizes.alignment(sources, targets, batch_size, name)
        with threads_set(self.threads):
            return align_sentences(
                self.trained, sources, targets, AlignmentMethod(method, layer, head),
                device=self.device, batch_size=batch_size,
            )  # fmt: skip

    def attention(self, src: str, tgt: str | None = None, kind: str = "cross") -> AttentionMap:
        """The `kind` attention map (cross, encoder, decoder, segment) of `src` with the
        model's greedy output, or with `tgt` forced, as visualize-alignment draws it.
        TypeError for an argument of the wrong type; UserError for an empty source or a kind
        the model lacks."""
        self._single("attention")
        arguments.text(src, "src")
        arguments.text(tgt, "tgt", optional=True)
        arguments.choice(kind, "kind", KINDS)
        if not src.strip():
            raise UserError("src is empty: give a source sentence")
        if kind in ("encoder", "decoder") and self.cfg.model.family.value != "transformer":
            raise UserError(f"kind={kind!r} needs a transformer; an RNN has cross-attention only")
        if kind == "segment" and not is_hierarchical(self.module):
            raise UserError(
                "kind='segment' needs a hierarchical model (model.attention.hierarchy=sentence)"
            )
        self.sizes.viewing(src, tgt)
        with threads_set(self.threads):
            return self.viewer.attention(src, tgt, kind)

    def explain(
        self,
        src: str,
        tgt: str | None = None,
        *,
        beam: int | None = None,
        methods: Iterable[str] | None = None,
        layer: int | None = None,
        head: int | None = None,
        path: str | Path | None = None,
    ) -> "ExplanationPage":
        """The self-contained HTML page of `attnseq explain` (analysis/explain_page.py) for
        `src`: every hypothesis of a beam search of size `beam` (default: the checkpoint's
        decoding.beam), or the forced target `tgt`; for each output piece the source weights
        of every method in `methods` (default: all the model has), and every attention map.
        `layer`/`head` (from 1) pick the map of the attention-based methods. Returns the page
        (an `ExplanationPage`: a str that a notebook shows inline, in a frame of its own)
        and, with `path`, also writes it there (atomically). Everything is checked before the
        work: TypeError for an argument of the wrong type; UserError for an empty source, an
        empty or too long target, an unknown method, a beam larger than the device's memory,
        or a `path` that cannot be written."""
        self._single("explain")
        arguments.text(src, "src")
        arguments.text(tgt, "tgt", optional=True)
        beam = arguments.integer(beam, "beam", low=1, optional=True)
        chosen = None if methods is None else arguments.strings(methods, "methods", "['attention']")
        layer = arguments.integer(layer, "layer", optional=True)
        head = arguments.integer(head, "head", optional=True)
        target = arguments.path(path, "path", optional=True)
        if not src.strip():
            raise UserError("src is empty: give a source sentence to explain")
        if tgt is not None and not tgt.strip():
            raise UserError("tgt is empty: give a target sentence, or leave tgt out to decode")
        self._check_explanation(chosen, layer, head)
        if target is not None:
            check_output_file(target, "path", ["html", "htm"])
        beam = self.cfg.decoding.beam if beam is None else beam
        count = len(available_methods(self.trained) if chosen is None else chosen)
        self.sizes.explanation(src, tgt, self.settings(beam=beam, nbest=beam), count)
        with threads_set(self.threads):
            explanation = explain(
                self.trained, src, tgt, checkpoint=str(self.path), beam=beam, methods=chosen,
                layer=layer, head=head, device=self.device,
            )  # fmt: skip
        page = ExplanationPage(explanation_html(explanation))
        if target is not None:
            write_page(target, page)
        return page

    def _check_explanation(
        self, methods: list[str] | None, layer: int | None, head: int | None
    ) -> None:
        """UserError in the API's words for a method the model cannot be explained by, or a
        layer or head outside its attention maps."""
        model_cfg = self.cfg.model
        if model_cfg.family.value == "transformer":
            check_layer_and_head(layer, head, model_cfg.dec_layers, model_cfg.heads, "", NAMES)
        else:
            check_layer_and_head(layer, head, 1, 1, "an RNN's attention is one map", NAMES)
        if methods is not None and not methods:
            raise UserError("methods is empty: name at least one method, or leave it out")
        for name in methods or []:
            check_method_fits(self.trained, canonical_method(name, "methods"), names=METHOD_NAMES)

    @property
    def sizes(self) -> RequestSizes:
        """The memory checks of this model's requests (attnseq/evaluation/request_sizes.py)."""
        return RequestSizes(self.cfg, self.tokenizers, self.device)

    @cached_property
    def viewer(self) -> AlignmentViewer:
        """Attention maps (attnseq/analysis/alignment_view.py), as visualize-alignment draws
        them; `attention` checks its arguments first."""
        return AlignmentViewer(self.trained, self.device)

    def _single(self, what: str) -> None:
        if self.ensemble:
            raise UserError(f"{what} needs one model: load the checkpoints one by one")


def _same_head_masks(before: dict[str, Tensor], after: dict[str, Tensor]) -> bool:
    """Whether the head masks of two state dicts are equal (a missing mask keeps every head,
    as all ones does)."""
    for name in {name for name in (*before, *after) if optional_entry(name)}:
        old, new = before.get(name), after.get(name)
        present = old if old is not None else new
        assert present is not None  # the name comes from one of the two
        ones = torch.ones_like(present, dtype=torch.float32)
        old = ones if old is None else old.float()
        if not torch.equal(old, ones if new is None else new.float()):
            return False
    return True


UNKNOWN_NAMED = 10  # the unknown pieces translate's warning names
NAMES = ("layer", "head")  # how the layer and head checks name them: the API's arguments
METHOD_NAMES = ("methods", "layer", "head")


def load(
    path: str | Path,
    device: str | torch.device = "auto",
    *,
    overrides: Iterable[str] | None = None,
    ensemble: Iterable[str | Path] = (),
    threads: int | str | None = None,
) -> Model:
    """Load a checkpoint, or the best checkpoint of a run directory.

    Args:
        path: a checkpoint file, or a run directory (its checkpoints/best.pt).
        device: auto (CUDA when there is one, else the CPU), cpu, cuda, cuda:N or mps, or a
            torch.device.
        overrides: key=value changes of the checkpoint's config, e.g. ["decoding.beam=3"].
        ensemble: more checkpoints that translate with the first as an ensemble.
        threads: torch's CPU threads for the model's computations, set around each call and
            restored after it: a number (1..4 x the CPUs), "auto" (the cores no other process
            keeps busy), or None (default: the process's count, untouched).

    Raises:
        TypeError: an argument of the wrong type (e.g. `overrides` a str, not a list).
        UserError: a missing or broken checkpoint, a bad override, members that cannot join,
            a device that is not one or that this machine lacks, a thread count out of range.
    """
    checkpoint = arguments.path(path, "path")
    target = resolve_device(device)  # before the slow work: a typo fails fast
    changes = [] if overrides is None else arguments.strings(overrides, "overrides", "['a.b=1']")
    members = [] if ensemble is None else _paths(ensemble, "ensemble")
    check_threads(threads, "threads")
    checkpoint = checkpoint_file(checkpoint)  # type: ignore[arg-type]
    members = [checkpoint, *(checkpoint_file(member) for member in members)]
    trained = load_ensemble(members, changes)
    return Model(trained, target, checkpoint, threads)


def _paths(value: object, name: str) -> list[Path]:
    """`value` as a list of paths (a lone str or path is refused: it names one file)."""
    if isinstance(value, str | bytes | Path) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of paths, not {type(value).__name__}")
    return [arguments.path(item, f"{name}[{index}]") for index, item in enumerate(value)]  # type: ignore[misc]


# What `plot_alignment` draws: the types, and the message for any other
Plottable = (
    AttentionMap
    | Translation
    | TranslatedHypothesis
    | ForcedAlignments
    | tuple[Tensor | np.ndarray, Sequence[str], Sequence[str]]
)
PLOTTABLE = (
    "attention must be an AttentionMap (Model.attention), a Translation or a "
    "TranslatedHypothesis (Model.translate(..., attention=True)), the ForcedAlignments of one "
    "pair (Model.align) or a (weights, source pieces, target pieces) tuple"
)


def plot_alignment(
    attention: Plottable,
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
    """A heatmap of `attention` as a matplotlib Figure, which Jupyter shows inline: for a
    transformer the mean of the last layer's heads, or `layer`/`head` (from 1), or every layer
    and head (`all_heads`); `words` merges subword pieces into words; `figsize` "W,H" in
    inches (each up to 100), `fontsize` 1..72 points, `cmap` a matplotlib colormap. The figure
    visualize-alignment saves.

    `attention` is one of: `Model.attention`'s map; a `Translation` (its best output) or a
    `TranslatedHypothesis` of `Model.translate(..., attention=True)`; the `ForcedAlignments`
    of one pair (`Model.align`: its word matrix, rows the target words); or a tuple (weights,
    source pieces, target pieces) with weights a tensor or array of shape (T, S) or
    (L, H, T, S), T the target pieces and S the source pieces (each piece a word of its own
    for `words`).

    Raises:
        TypeError: `attention` is none of those, or another argument of the wrong type.
        UserError: a translation without attention or output, alignments of several pairs,
            weights whose shape does not match the pieces, a layer or head out of the model's
            range, or a style out of range.
    """
    if not isinstance(attention, AttentionMap | Translation | TranslatedHypothesis) and not (
        isinstance(attention, ForcedAlignments)
        or (isinstance(attention, tuple) and len(attention) == 3)
    ):
        raise TypeError(f"{PLOTTABLE}, not {type(attention).__name__}")
    layer = arguments.integer(layer, "layer", optional=True)
    head = arguments.integer(head, "head", optional=True)
    arguments.flag(all_heads, "all_heads")
    arguments.flag(words, "words")
    arguments.text(title, "title", optional=True)
    arguments.text(figsize, "figsize", optional=True)
    fontsize = arguments.number(fontsize, "fontsize", low=1.0, high=72.0)  # type: ignore[assignment]
    arguments.text(cmap, "cmap")
    _show_figures_inline_in_ipython()
    attention = plotted_map(attention)
    weights = attention.weights
    layers, heads = weights.shape[:2] if weights.ndim == 4 else (1, 1)
    check_layer_and_head(layer, head, layers, heads, "" if weights.ndim == 4 else "one map", NAMES)
    if words:
        attention = merge_words(attention)
    style = style_from_options(figsize, fontsize, cmap)  # the messages name the arguments
    return draw(attention, layer=layer, head=head, all_heads=all_heads, title=title, style=style)


def plotted_map(attention: Plottable) -> AttentionMap:
    """The map `plot_alignment` draws of `attention` (its docstring says what it takes)."""
    if isinstance(attention, Translation):
        if not attention.hypotheses:
            raise UserError("this translation has no output (its source is blank): no attention")
        return attention.hypotheses[0].attention_map()
    if isinstance(attention, TranslatedHypothesis):
        return attention.attention_map()
    if isinstance(attention, ForcedAlignments):
        return _alignment_map(attention)
    if isinstance(attention, tuple):
        return _pieces_map(*attention)
    return attention


def _alignment_map(result: ForcedAlignments) -> AttentionMap:
    """The word matrix of an alignment of one pair, labelled by the pair's words."""
    if len(result.soft) != 1:
        raise UserError(
            f"attention holds the alignments of {len(result.soft)} pairs; plot one pair: "
            "Model.align(src, tgt) with one str each"
        )
    matrix = result.soft[0]  # (Tw, Sw)
    rows = result.target_words[0] if result.target_words else None
    columns = result.source_words[0] if result.source_words else None
    rows = rows or [str(index) for index in range(matrix.shape[0])]
    columns = columns or [str(index) for index in range(matrix.shape[1])]
    return AttentionMap(
        matrix, rows, columns, "word", "word", source=" ".join(columns), output=" ".join(rows)
    )


def _pieces_map(weights: object, source: object, target: object) -> AttentionMap:
    """The map of a (weights, source pieces, target pieces) tuple: weights (T, S) or
    (L, H, T, S), a tensor or an array."""
    if isinstance(weights, Tensor):
        array = weights.detach().float().cpu().numpy()
    elif isinstance(weights, np.ndarray) and weights.dtype.kind in "fiub":
        array = weights.astype(np.float32)
    else:
        raise TypeError(
            "attention[0] must be the weights, a torch.Tensor or a numpy array of numbers, "
            f"not {type(weights).__name__}"
        )
    columns = arguments.strings(source, "attention[1]", "the source pieces ['a', 'b']")
    rows = arguments.strings(target, "attention[2]", "the target pieces ['x', 'y']")
    if array.ndim not in (2, 4) or array.shape[-2:] != (len(rows), len(columns)):
        raise UserError(
            f"attention[0] has shape {tuple(array.shape)}; with {len(rows)} target and "
            f"{len(columns)} source pieces it must be ({len(rows)}, {len(columns)}) or "
            f"(layers, heads, {len(rows)}, {len(columns)})"
        )
    if not rows or not columns:
        raise UserError("attention[1] and attention[2] must each hold at least one piece")
    if not np.isfinite(array).all():
        raise UserError("attention[0] holds NaN or infinite weights")
    return AttentionMap(
        array, rows, columns, "word", "word", source=" ".join(columns), output=" ".join(rows)
    )


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


# ------------------------------------------------------------------------------- training
# Hydra's default job-logging format, so a run's train.log reads the same from either entry
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


@dataclass(frozen=True)
class TrainResult:
    """What `train` returns: the run directory and the metrics of its metrics.json (test
    metrics of the best checkpoint, e.g. "test/exact_match")."""

    run_dir: Path
    metrics: dict[str, float]

    @property
    def checkpoint(self) -> Path:
        """The run's best checkpoint, RUN/checkpoints/best.pt (what `attnseq.load` takes)."""
        return self.run_dir / "checkpoints" / "best.pt"

    def __repr__(self) -> str:
        """One line: the run directory and the first `REPR_METRICS` metrics (4 significant
        digits), with how many more there are."""
        shown = ", ".join(
            f"{name!r}: {value:.4g}" if isinstance(value, float) else f"{name!r}: {value!r}"
            for name, value in list(self.metrics.items())[:REPR_METRICS]
        )
        more = len(self.metrics) - REPR_METRICS
        if more > 0:
            shown += f", ... {more} more"
        return f"TrainResult(run_dir={str(self.run_dir)!r}, metrics={{{shown}}})"


REPR_METRICS = 4  # the metrics a TrainResult's repr shows


def train(
    overrides: Iterable[str] = (),
    run_dir: str | Path | None = None,
    *,
    progress: bool | None = None,
    verbose: bool = True,
    callbacks: Sequence[Callback] = (),
) -> TrainResult:
    """Train one model: `overrides` are what follows `attnseq train` on the command line
    (key=value, group=option, config=NAME or config=PATH.yaml); `run_dir` is where the run
    goes (default: the config's outputs/DATE/TIME, created fresh), given here or as the
    override hydra.run.dir=DIR, not both.

    Args:
        progress: a bar with the updates, loss and ETA: True on stderr whatever it is (a
            widget in a notebook with ipywidgets, else text), False none, None (default)
            when the call is interactive (a notebook kernel, a terminal), `verbose` is on and
            trainer.progress is not false.
        verbose: the "attnseq" logger's lines (the run's header, validation results, the
            periodic training lines) on the caller's stderr besides train.log, and the test
            metrics printed at the end; False: nothing but errors (train.log has it all).
        callbacks: objects with `on_update`, `on_validation` and/or `on_end` (subclass
            `attnseq.Callback`): they hear of each update and validation and may end the
            run early (the run then ends as an early stop does: checkpoints, test, result).

    Raises:
        TypeError: `overrides` is not a list of str (a lone str included), `run_dir` is not
            a str or path, `progress`/`verbose` not True or False, a callback without any of
            the methods.
        UserError: an invalid override or config, a sweep (several values of a key), both
            run_dir and hydra.run.dir, a run directory in use or holding another run, missing
            or unreadable data (the run directory this call made is then removed).
        TrainingInterrupted: a Ctrl-C (SIGINT) or SIGTERM; a KeyboardInterrupt whose message
            says what was saved and the `attnseq.train(...)` call that resumes the run
            (also its `resume` attribute).
        TrainingDiverged: as `attnseq.training.run.run_training`.
    """
    from attnseq.training.composition import (
        check_run,
        compose,
        quoted_value,
        rewrite_config_selector,
    )

    given = arguments.strings(overrides, "overrides", "['trainer.max_steps=10']")
    folder = arguments.path(run_dir, "run_dir", optional=True)
    asked = Watching(
        None if progress is None else arguments.flag(progress, "progress"),
        arguments.flag(verbose, "verbose"),
        check_callbacks(callbacks, "callbacks"),
    )
    args = rewrite_config_selector(given)
    if folder is not None:
        _refuse_second_run_dir(args, folder)
        args.append(f"hydra.run.dir={quoted_value(str(folder.absolute()))}")
    _refuse_sweeps(args)
    config = compose(args)
    named = Path(str(config.hydra.run.dir)).absolute()
    missing = [folder for folder in (named, *named.parents) if not folder.exists()]
    elsewhere = "run_dir=DIR" if folder is not None else "hydra.run.dir=DIR"
    cfg = check_run(config, lock=False, elsewhere=elsewhere)  # run_training locks it
    directory = Path(str(config.hydra.run.dir))
    if directory.absolute() != named:  # check_run claimed a fresh one beside a taken name
        missing.insert(0, directory.absolute())
    try:
        with _process_settings_kept():
            metrics = _run(cfg, config, given, directory, asked)
    except UserError:
        _remove_refused(directory, missing)
        raise
    except TrainingInterrupted as interruption:
        _tell_resume(interruption, given, directory, asked)
        raise
    return TrainResult(directory, metrics)


@dataclass(frozen=True)
class Watching:
    """How the caller of `train` watches the run: its progress, verbose and callbacks."""

    progress: bool | None
    verbose: bool
    callbacks: list[Any]

    def bar(self, cfg: TrainConfig) -> bool:
        """Whether the training bar is drawn (on stderr, whatever it is)."""
        if self.progress is not None:
            return self.progress
        return self.verbose and cfg.trainer.progress and (in_notebook() or sys.stderr.isatty())


@contextmanager
def _process_settings_kept() -> Iterator[None]:
    """Put back, after the block, what training sets for the whole process: torch's CPU
    threads (trainer.threads), the TF32 switches (trainer.tf32), the random-number states
    (seed: torch's, Python's `random`, CUDA's where it was in use before)."""
    from attnseq.training.state import rng_state, set_rng_state

    threads = torch.get_num_threads()
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    generators = rng_state()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        set_rng_state(generators)


def _tell_resume(
    interruption: TrainingInterrupted, given: list[str], directory: Path, asked: Watching
) -> None:
    """The interruption's message in Python's words: what was saved, and the `attnseq.train`
    call that continues the run (the same overrides with resume=auto, in `directory`)."""
    from attnseq.training.resume import interruption_message

    dropped = ("resume=", "trainer.overwrite=", "hydra.run.dir=")  # set here / would replace it
    kept = [arg for arg in given if not arg.lstrip("+~").startswith(dropped)]
    words = [repr([*kept, "resume=auto"]), f"run_dir={str(directory.absolute())!r}"]
    if asked.progress is not None:
        words.append(f"progress={asked.progress!r}")
    if not asked.verbose:
        words.append("verbose=False")
    call = f"attnseq.train({', '.join(words)})"
    if asked.callbacks:
        call = call[:-1] + ", callbacks=[...])  # the same callbacks"
    interruption.tell(interruption_message(interruption, directory, call), call)


def _remove_refused(directory: Path, created: list[Path]) -> None:
    """After a refused start: the run directory and the folders above it, deepest first, as
    far as this call created them and they hold nothing else (no run outputs)."""
    if directory.absolute() not in created or run_outputs(directory):
        return
    shutil.rmtree(directory, ignore_errors=True)
    for folder in created:
        try:
            folder.rmdir()  # only when empty: another run may have started beside this one
        except OSError:
            continue


def _run(
    cfg: "TrainConfig",
    config: "DictConfig",
    overrides: list[str],
    directory: Path,
    asked: Watching,
) -> dict[str, float]:
    """Hydra's record of the run in `directory`, then the training, logging to train.log
    (and to the caller, as `asked`)."""
    from omegaconf import OmegaConf

    from attnseq.config.conversion import config_to_dict
    from attnseq.io.atomic import atomic_write_text
    from attnseq.training.run import run_training

    record = directory / ".hydra"
    try:
        record.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {record}: {error.strerror}") from None
    atomic_write_text(record / "config.yaml", OmegaConf.to_yaml(config_to_dict(cfg)))
    atomic_write_text(record / "overrides.yaml", OmegaConf.to_yaml(overrides))
    with _train_log(directory / "train.log", asked.verbose):
        return run_training(
            cfg,
            directory,
            callbacks=asked.callbacks,
            progress=asked.bar(cfg),
            summary=asked.verbose,
        )


def _refuse_second_run_dir(args: list[str], run_dir: Path) -> None:
    """UserError when an override also names the run directory: the two would disagree, and
    which one wins would be a guess."""
    for arg in args:
        key = arg.split("=", 1)[0].lstrip("+~").strip()
        if key == "hydra.run.dir":
            raise UserError(
                f"run_dir={str(run_dir)!r} and the override {arg} both name the run "
                "directory: give one of them"
            )


def _refuse_sweeps(args: list[str]) -> None:
    """UserError for an override with several values: one call trains one model."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except OverrideParseException as error:
        raise UserError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    swept = [override.input_line for override in parsed if override.is_sweep_override()]
    if swept:
        raise UserError(
            f"attnseq.train trains one model, but {swept[0]} sweeps several values: call it "
            "once per value, or run the sweep with `attnseq train -m`"
        )


@contextmanager
def _train_log(path: Path, verbose: bool) -> Iterator[None]:
    """The "attnseq" logger's INFO lines go to `path` while the block runs, and:

    - `verbose`: to the caller's stderr as well, unless a handler of the caller's logging
      shows them already (`logging.basicConfig(level=logging.INFO)` and the like: a plain
      StreamHandler on the way up with a level that lets INFO through);
    - not `verbose`: to the caller's stderr at ERROR only, and not on to the caller's own
      handlers (the logger does not propagate meanwhile): silence apart from errors.
    """
    logger = logging.getLogger("attnseq")
    added: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
    if not (verbose and _info_shown(logger)):
        added.append(logging.StreamHandler(sys.stderr))  # now's: a notebook cell's, a capture
        added[-1].setLevel(logging.INFO if verbose else logging.ERROR)
    previous, propagates = logger.level, logger.propagate
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.propagate = propagates and verbose
    for each in added:
        each.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(each)
    try:
        yield
    finally:
        for each in added:
            logger.removeHandler(each)
            each.close()
        logger.setLevel(previous)
        logger.propagate = propagates


def _info_shown(logger: logging.Logger) -> bool:
    """Whether a plain StreamHandler (a console's: basicConfig's) on `logger`'s way up shows
    its INFO records. Files and capture handlers (pytest's, subclasses) do not count."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if type(handler) is logging.StreamHandler and handler.level <= logging.INFO:
                return True
        current = current.parent if current.propagate else None
    return False


# ------------------------------------------------------------------------------ comparison
def compare(
    systems: Sequence[str | Path],
    baseline: str | Path | None = None,
    references: str | Path | Sequence[str] | None = None,
    sources: str | Path | Sequence[str] | None = None,
    split: str = "test",
    task: str | None = None,
    seed: int = 12345,
    resamples: int = 1000,
    trials: int = 10000,
    buckets: Sequence[int] | None = None,
    device: str = "auto",
    train_references: str | Path | Sequence[str] | None = None,
    gold: str | Path | None = None,
    attention: bool = True,
    threads: int | str | None = None,
) -> "Comparison | SeedComparison":
    """Is A better than B? `attnseq compare` from Python: the systems (hypothesis files,
    `attnseq eval` result folders, run directories or checkpoints) against `baseline` (one of
    them, by path; default the first), each metric with its 95% bootstrap interval and the
    paired bootstrap and approximate randomization p-values, the metric by length and the
    length ratios and their sentence buckets, word F-measure by training frequency, and the
    checkpoints' attention entropy (attnseq/analysis/comparison.py). `references`, `sources`
    and `train_references` (the training targets the word frequencies count; default: the
    train split of the first checkpoint's data): a file or the lines themselves; `buckets`:
    the lower length edges in words; `gold`: a file of gold (source word, reference word)
    links of the test set, for the AER of each checkpoint's attention; `attention=False`
    skips the attention pass; `threads`: torch's CPU threads while checkpoints decode, as
    `load(threads=)` takes them (your count is put back afterwards).

        result = attnseq.compare(["runs/a", "runs/b"])
        result.scores["runs/b"]["bleu"].p_bootstrap, result.save_figure("by_length.png")
        attnseq.compare(["multirun/DATE/TIME"])  # a sweep folder's configurations over seeds
        result.words.scores["runs/b"][0].f_measure  # unseen words (result.words: WordTable)
    """
    from attnseq.analysis.comparison import read_lines
    from attnseq.analysis.seed_comparison import compare_paths

    if isinstance(systems, str | Path) or not isinstance(systems, Sequence):
        raise TypeError("systems must be a list of paths")

    def lines(value: object, name: str) -> list[str] | None:
        if value is None:
            return None
        if isinstance(value, str | Path):
            return read_lines(Path(value), name)
        if isinstance(value, Sequence) and all(isinstance(line, str) for line in value):
            return list(value)
        raise TypeError(f"{name} must be a path or a list of strings")

    check_threads(threads, "threads")
    with threads_set(threads):  # the decoding of checkpoints; the caller's count comes back
        return compare_paths(
            systems, baseline, lines(references, "references"), lines(sources, "sources"),
            task, split, device, seed, resamples, trials, buckets,
            lines(train_references, "train_references"), None if gold is None else Path(gold),
            attention,
        )  # fmt: skip
