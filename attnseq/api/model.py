"""`attnseq.load` and the `Model` it gives: translate, score, align, attention, explain, save."""

import dataclasses
import warnings
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Any, overload

import torch
from torch import Tensor

from attnseq.alignment.attribution import canonical_method, check_method_fits
from attnseq.alignment.forced import AlignmentMethod, ForcedAlignments, align_sentences
from attnseq.alignment.segments import is_hierarchical
from attnseq.alignment.word_links import check_layer_and_head
from attnseq.analysis.alignment_view import KINDS, AlignmentViewer, AttentionMap
from attnseq.analysis.explain_page import explanation_html, write_page
from attnseq.analysis.explanation import available_methods, explain
from attnseq.api import arguments
from attnseq.api.arguments import DECODING_SETTINGS, decoding_setting
from attnseq.api.request_sizes import RequestSizes
from attnseq.api.results import ExplanationPage, TranslatedHypothesis, Translation
from attnseq.config.devices import resolve_device
from attnseq.config.schema import DecodingConfig, TrainConfig
from attnseq.config.threads import check_threads, threads_set
from attnseq.data.extended_vocab import extended_pieces
from attnseq.data.tokenizers import TokenizerPair
from attnseq.data.unknown_tokens import UnknownCount
from attnseq.decoding import Hypothesis
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.evaluation.scoring import PairScore, Scorer
from attnseq.io.checkpoint import (
    HEADER_KEYS,
    TRAINING_STATE_KEYS,
    refuse_replacing_training_state,
    save_checkpoint,
)
from attnseq.io.user_paths import check_output_file
from attnseq.models.ensemble import load_ensemble
from attnseq.models.head_mask import optional_entry
from attnseq.models.loading import TrainedModel, load_weights, model_for
from attnseq.models.positional import position_limit

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


# The longest output a decoding may be allowed (max_output_ratio x source + max_output_extra):
# far beyond any sentence or summary, and short enough that a search that never ends its
# outputs stops within minutes rather than days.
MAX_OUTPUT_TOKENS = 100_000


class Model:
    """A trained model loaded by `load`: translate, score, align, attention maps; `save`
    writes it back as a checkpoint.

    Attributes:
        config: the checkpoint's `TrainConfig`, overrides applied.
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
            caller's count; as `load` takes them).
    """

    def __init__(
        self,
        trained: TrainedModel,
        device: torch.device,
        path: Path,
        threads: int | str | None = None,
    ) -> None:
        self.trained = trained
        self._config: TrainConfig = trained.cfg
        self.tokenizers: TokenizerPair = trained.tokenizers
        self.device = device
        self.module = trained.model.to(device).eval()
        self.path = path
        self.ensemble = "ensemble" in trained.payload
        self.threads = threads

    def __repr__(self) -> str:
        """One line, e.g. "<attnseq.Model transformer, 1,234,567 parameters, vocabularies
        8000/8000 (source/target), on cpu, from run/checkpoints/best.pt>"."""
        family = self.config.model.family.value
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
        """The checkpoint's config with the overrides of `load`."""
        return self._config

    @property
    def decoding(self) -> DecodingConfig:
        """The decoding settings `translate` uses where a call changes none: the config's
        decoding.* (`config.decoding`). A call's keywords change them for that call only."""
        return self.config.decoding

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

        A file that holds the state of a training run (a run's last.pt or best.pt, by its
        content, whatever its name or the path it is reached by) is never written over: the
        run could no longer be resumed from it. Any other file, the checkpoint the model was
        loaded from included, is replaced by the model as it is now.

        Raises:
            TypeError: `path` is not a str or path.
            UserError: an ensemble (no one set of weights computes it), a `path` that cannot
                be written or is no .pt file, weights that no longer fit the config (heads
                removed from the weights), or a file that holds a training run's state.
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
        remedy = "save to another path (or delete that file first, if the run is of no use)"
        refuse_replacing_training_state(target, "path", "a saved model", remedy)
        state = {name: value.detach().cpu() for name, value in self.module.state_dict().items()}
        load_weights(target, model_for(self.config, self.tokenizers), state)  # as `load` will
        save_checkpoint(target, self._saved_payload(state))
        return target

    def _saved_payload(self, state: dict[str, Tensor]) -> dict[str, Any]:
        """What `save` writes: the loaded payload's records of the model without the state of
        training and the file header, and the config, tokenizers and weights of now."""
        from attnseq.config.conversion import config_to_dict

        loaded = self.trained.payload
        payload = {
            key: value
            for key, value in loaded.items()
            if key not in TRAINING_STATE_KEYS and key not in HEADER_KEYS
        }
        if "head_pruning" in payload and not _same_head_masks(loaded["model"], state):
            del payload["head_pruning"]  # it names the heads of masks the model no longer has
        payload.update(
            config=config_to_dict(self.config), tokenizers=self.tokenizers.state(), model=state
        )
        return payload

    @cached_property
    def translator(self) -> Translator:
        """Text in, text out (attnseq/decoding/translate.py), as `attnseq translate` runs."""
        return Translator(self.module, self.tokenizers, self.config, self.device)

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
        self._check_output_limit(dataclasses.replace(self.config.decoding, **given))
        return self.translator.settings(**checked)

    def _check_output_limit(self, settings: DecodingConfig) -> None:
        """UserError when outputs of the longest source the model reads could run past
        `MAX_OUTPUT_TOKENS`, or past the positions of a model with learned ones."""
        longest, ratio = self.config.data.max_src_len, settings.max_output_ratio
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
        cross-attention (`TranslatedHypothesis.attention`). TypeError for an argument of the
        wrong type; UserError for invalid settings or a request larger than the device's
        memory."""
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
        source_ids = src.encode(text.rstrip("\r\n"))[: self.config.data.max_src_len]
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
        check_method_fits(self.trained, name, layer, head)
        self.sizes.alignment(sources, targets, batch_size, name)
        with threads_set(self.threads):
            return align_sentences(
                self.trained,
                src_lines=sources,
                tgt_lines=targets,
                method=AlignmentMethod(method, layer, head),
                device=self.device,
                batch_size=batch_size,
            )

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
        if kind in ("encoder", "decoder") and self.config.model.family.value != "transformer":
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
        beam = self.config.decoding.beam if beam is None else beam
        count = len(available_methods(self.trained) if chosen is None else chosen)
        self.sizes.explanation(src, tgt, self.settings(beam=beam, nbest=beam), count)
        if tgt is not None:
            self._check_target_length(tgt)
        with threads_set(self.threads):
            explanation = explain(
                self.trained,
                src=src,
                tgt=tgt,
                checkpoint=str(self.path),
                beam=beam,
                methods=chosen,
                layer=layer,
                head=head,
                device=self.device,
            )
        page = ExplanationPage(explanation_html(explanation))
        if target is not None:
            write_page(target, page)
        return page

    def _check_explanation(
        self, methods: list[str] | None, layer: int | None, head: int | None
    ) -> None:
        """UserError in the API's words for a method the model cannot be explained by, or a
        layer or head outside its attention maps."""
        model_cfg = self.config.model
        if model_cfg.family.value == "transformer":
            check_layer_and_head(layer, head, model_cfg.dec_layers, model_cfg.heads)
        else:
            check_layer_and_head(layer, head, 1, 1, "an RNN's attention is one map")
        if methods is not None and not methods:
            raise UserError("methods is empty: name at least one method, or leave it out")
        for name in methods or []:
            check_method_fits(self.trained, canonical_method(name, "methods"), names=METHOD_NAMES)

    def _check_target_length(self, tgt: str) -> None:
        """UserError for a forced target longer than the model's target limit: every piece
        takes a backward pass of its own over the target, so the work grows with its square, and
        beyond the limit the model has never read a target."""
        pieces = len(self.tokenizers.tgt.encode(tgt))
        limit = self.config.data.max_tgt_len
        if pieces > limit:
            raise UserError(
                f"tgt has {pieces:,} pieces; explain takes at most {limit} (the model's "
                f"data.max_tgt_len): give a shorter target"
            )

    @property
    def sizes(self) -> RequestSizes:
        """The memory checks of this model's requests (attnseq/api/request_sizes.py)."""
        return RequestSizes(self.config, self.tokenizers, self.device)

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
    members = [] if ensemble is None else arguments.paths(ensemble, "ensemble")
    check_threads(threads, "threads")
    checkpoint = checkpoint_file(checkpoint)  # type: ignore[arg-type]
    members = [checkpoint, *(checkpoint_file(member) for member in members)]
    trained = load_ensemble(members, changes)
    return Model(trained, target, checkpoint, threads)
