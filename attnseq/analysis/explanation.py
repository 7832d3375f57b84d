"""What `attnseq explain` shows about one source sentence: each output (the beam's hypotheses, or
one forced target) with its attention maps and every attribution method's source weights.
Shapes: L layers, H heads, S source pieces, T output pieces."""

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

import attnseq
from attnseq.alignment.attribution import (
    ATTENTION_METHODS,
    ATTRIBUTION_METHODS,
    PairAttribution,
    attribute,
    canonical_method,
    check_method_fits,
)
from attnseq.alignment.word_links import check_layer_and_head
from attnseq.analysis.alignment_view import AlignmentViewer, AttentionMap
from attnseq.config.schema import DecodingConfig
from attnseq.decoding.settings import max_output_lengths
from attnseq.decoding.translate import Translator
from attnseq.errors import UserError
from attnseq.models.loading import TrainedModel
from attnseq.models.positional import position_limit

SELF_ATTENTION_KINDS = ("encoder", "decoder")


@dataclass(frozen=True)
class LayeredMaps:
    """Attention maps of one kind, one per layer and head: weights (L, H, R, C) float32, the
    row labels (R) and column labels (C)."""

    weights: np.ndarray
    rows: list[str]
    columns: list[str]

    @classmethod
    def of(cls, attention: AttentionMap) -> "LayeredMaps":
        """An `AttentionMap`'s weights with the layer and head axes always present: an RNN's
        (T, S) becomes (1, 1, T, S)."""
        weights = np.asarray(attention.weights, dtype=np.float32)
        while weights.ndim < 4:
            weights = weights[None]
        return cls(weights, list(attention.rows), list(attention.columns))


@dataclass(frozen=True)
class MethodWeights:
    """One method's attribution of one output: source (T + 1, S); prefix (T + 1, T + 1) over
    the decoder inputs <s>, y_0 .. y_{T-1}, or None where the method does not attribute to it;
    source_share (T + 1,): the gradient methods' share of each step's attribution that falls
    on the source (the rest on the prefix), else None."""

    source: np.ndarray
    prefix: np.ndarray | None = None
    source_share: np.ndarray | None = None

    @classmethod
    def of(cls, attribution: PairAttribution) -> "MethodWeights":
        """`attribute`'s result for one pair, as numpy arrays."""
        prefix, share = attribution.target_prefix, attribution.source_share
        return cls(
            attribution.source.numpy(),
            None if prefix is None else prefix.numpy(),
            None if share is None else share.numpy(),
        )


@dataclass(frozen=True)
class ExplainedOutput:
    """One output and what explains it.

    text: the output text. pieces: its T pieces as the target tokenizer splits the text.
    score: the beam's length-normalised score (decoded), or the mean log-probability per
        piece and </s> (forced). log_prob: sum of `token_log_probs`.
    token_log_probs: (T + 1,) log p(y_t | y_<t, x) of each piece and </s>, teacher-forced.
    cross: the cross-attention maps (rows: the pieces and </s>, columns: the source pieces).
    decoder: the decoder self-attention maps (rows and columns: <s> and the pieces), or None.
    methods: each method's weights, by method name.
    p_gen: (T + 1,) copy models' generation probability, else None.
    """

    text: str
    pieces: list[str]
    score: float
    log_prob: float
    token_log_probs: np.ndarray
    cross: LayeredMaps
    decoder: LayeredMaps | None
    methods: dict[str, MethodWeights]
    p_gen: np.ndarray | None = None


@dataclass(frozen=True)
class Explanation:
    """Everything the page shows about one source sentence.

    checkpoint: the checkpoint file. model: what the header says of the model (family,
    parameters, layers, heads, width, attention). decoding: the settings that produced the
    outputs (beam, length penalty, max output length); forced: True when the output was given.
    source: the source text; source_pieces: its S pieces as the model reads them.
    encoder: the encoder self-attention maps (transformers), or None. outputs: best first.
    methods: the attribution methods shown, in order.
    """

    checkpoint: str
    model: dict[str, str]
    decoding: dict[str, str]
    forced: bool
    source: str
    source_pieces: list[str]
    encoder: LayeredMaps | None
    outputs: list[ExplainedOutput]
    methods: list[str]
    version: str = field(default=attnseq.__version__)


def explain(
    trained: TrainedModel,
    src: str,
    tgt: str | None = None,
    *,
    checkpoint: str = "",
    beam: int | None = None,
    methods: Sequence[str] | None = None,
    layer: int | None = None,
    head: int | None = None,
    device: torch.device | str = "cpu",
) -> Explanation:
    """Explain `src` with the model's beam-search outputs (n-best = `beam`, default the
    checkpoint's decoding.beam), or with the forced target `tgt`. An empty output (</s> at
    once) has no piece to explain and is left out.

    Args:
        trained: a loaded checkpoint (attnseq/models/loading.py).
        src: the source sentence.
        tgt: a target to explain instead of decoding.
        checkpoint: the checkpoint's path, for the header.
        beam: beam size and number of outputs explained.
        methods: attribution method names (default: every method the model has).
        layer, head: the attention map of the attention-based methods (1-based; default the
            last layer, the mean of its heads).
        device: where the model runs.

    Raises:
        UserError: an empty source or one longer than the model reads, an empty target or one
            longer than the model's positions, an unknown method or one the model lacks, a
            layer or head outside the model's, invalid decoding settings, only empty outputs.
    """
    chosen = check_request(trained, src, tgt, methods, layer, head)
    device = torch.device(device)
    translator = Translator(trained.model, trained.tokenizers, trained.cfg, device)
    settings = translator.settings(beam=beam, nbest=beam)
    decoded = _decode(translator, src, settings) if tgt is None else [(tgt, None)]
    viewer = AlignmentViewer(trained, device)
    passes = [viewer.maps(src, text) for text, _ in decoded]
    weights = method_weights(trained, src, [text for text, _ in decoded], chosen, layer, head)
    outputs = [
        _explained_output(text, beam_score, maps, log_probs, methods_of_output)
        for (text, beam_score), (maps, log_probs), methods_of_output in zip(
            decoded, passes, weights, strict=True
        )
    ]
    first_maps = passes[0][0]
    encoder = first_maps.get("encoder")
    return Explanation(
        checkpoint=checkpoint,
        model=model_summary(trained),
        decoding=_decoding_summary(trained, src, settings, forced=tgt is not None),
        forced=tgt is not None,
        source=src,
        source_pieces=list(first_maps["cross"].columns),
        encoder=None if encoder is None else LayeredMaps.of(encoder),
        outputs=outputs,
        methods=list(chosen),
    )


def available_methods(trained: TrainedModel) -> list[str]:
    """The attribution methods this model can be explained by, in the order of
    `ATTRIBUTION_METHODS` (rollout needs a transformer, the gradient methods captum)."""
    have = []
    for name in ATTRIBUTION_METHODS:
        try:
            check_method_fits(trained, name)
        except UserError:
            continue
        have.append(name)
    return have


def check_request(
    trained: TrainedModel,
    src: str,
    tgt: str | None,
    methods: Sequence[str] | None,
    layer: int | None = None,
    head: int | None = None,
    names: tuple[str, str, str] = ("methods", "layer", "head"),
) -> list[str]:
    """The methods to run (`methods`, aliases resolved, or every method the model can be
    explained by), once the request is known to be answerable: UserError for an empty source
    or one longer than the model reads, an empty target or one longer than its positions, an
    unknown method or one the model cannot be explained by, a `layer`/`head` outside the
    model's maps. `names`: what the messages call the methods, layer and head (by default
    the arguments; a command passes its options)."""
    if not src.strip():
        raise UserError("empty source: give a source sentence to explain")
    model_cfg = trained.cfg.model
    if model_cfg.family.value != "transformer" and model_cfg.attention.score.value == "none":
        raise UserError("this model has no attention (model.attention.score=none)")
    _check_source(trained, src)
    if tgt is not None:
        _check_target(trained, tgt)
    _check_map(trained, layer, head, names[1:])
    if methods is None:
        return available_methods(trained)
    chosen = list(dict.fromkeys(canonical_method(name, names[0]) for name in methods))
    if not chosen:
        raise UserError(f"no method given: choose from {', '.join(ATTRIBUTION_METHODS)}")
    for name in chosen:
        check_method_fits(trained, name, names=names)
    return chosen


def _check_map(
    trained: TrainedModel, layer: int | None, head: int | None, names: tuple[str, str]
) -> None:
    """UserError unless `layer` and `head` (called `names` in the messages) name a map of
    the model (an RNN has one)."""
    model_cfg = trained.cfg.model
    if model_cfg.family.value == "transformer":
        check_layer_and_head(layer, head, model_cfg.dec_layers, model_cfg.heads, "", names)
    else:
        check_layer_and_head(layer, head, 1, 1, "an RNN's attention is one map", names)


def _check_source(trained: TrainedModel, src: str) -> None:
    """UserError for a source longer than the model reads (data.max_src_len): the methods
    attribute to every piece of it, the model would see a cut one."""
    pieces = len(trained.tokenizers.src.encode(src))
    limit = trained.cfg.data.max_src_len
    if pieces > limit:
        raise UserError(
            f"the source has {pieces} pieces; this model reads at most {limit} "
            "(data.max_src_len): shorten it"
        )


def _check_target(trained: TrainedModel, tgt: str) -> None:
    """UserError for a target the model cannot score: empty, or longer than its positions."""
    ids = trained.tokenizers.tgt.encode(tgt)
    if not tgt.strip() or not ids:
        raise UserError("empty target: give a target sentence, or none to decode")
    limit = position_limit(trained.model)
    if limit is not None and len(ids) + 1 > limit:
        raise UserError(
            f"the target has {len(ids)} pieces; this model has {limit} positions, so it scores "
            f"targets of at most {limit - 1}"
        )


def _decode(
    translator: Translator, src: str, settings: DecodingConfig
) -> list[tuple[str, float | None]]:
    """(text, length-normalised score) of each beam-search output of `src`, best first."""
    [(hypotheses, oovs)] = list(translator.nbest_lists([src], settings, 1, 1))
    outputs = []
    for hypothesis in hypotheses or []:
        score = hypothesis.normalized_score
        text = translator.output_text(hypothesis, oovs)
        outputs.append((text, hypothesis.score if score is None else score))
    if not outputs or not any(text.strip() for text, _ in outputs):
        raise UserError(
            "the model's output is empty: there is nothing to explain; give a target to "
            "explain one of your choice"
        )
    return [(text, score) for text, score in outputs if text.strip()]


def method_weights(
    trained: TrainedModel,
    src: str,
    texts: Sequence[str],
    methods: Sequence[str],
    layer: int | None = None,
    head: int | None = None,
) -> list[dict[str, MethodWeights]]:
    """Each method's weights for each output text, by method name: one `attribute` call per
    method over all (src, text) pairs; `layer`/`head` go to the attention-based methods."""
    pairs = [(src, text) for text in texts]
    result: list[dict[str, MethodWeights]] = [{} for _ in texts]
    for name in methods:
        reads_a_map = name in ATTENTION_METHODS
        attributions = attribute(
            trained,
            pairs,
            name,
            layer=layer if reads_a_map else None,
            head=head if reads_a_map else None,
        )
        for by_method, attribution in zip(result, attributions, strict=True):
            by_method[name] = MethodWeights.of(attribution)
    return result


def _explained_output(
    text: str,
    beam_score: float | None,
    maps: dict[str, AttentionMap],
    token_log_probs: np.ndarray,
    methods: dict[str, MethodWeights],
) -> ExplainedOutput:
    cross = maps["cross"]
    for name, weights in methods.items():  # the same pieces, tokenized the same way
        if weights.source.shape != cross.weights.shape[-2:]:
            raise ValueError(
                f"{name} attributes {weights.source.shape} (steps, source pieces) but the "
                f"attention maps have {cross.weights.shape[-2:]}"
            )
    log_prob = float(token_log_probs.sum())
    score = log_prob / len(token_log_probs) if beam_score is None else beam_score
    decoder = maps.get("decoder")
    return ExplainedOutput(
        text=text,
        pieces=list(cross.rows[:-1]),  # the last row predicts </s>
        score=float(score),
        log_prob=log_prob,
        token_log_probs=token_log_probs,
        cross=LayeredMaps.of(cross),
        decoder=None if decoder is None else LayeredMaps.of(decoder),
        methods=methods,
        p_gen=cross.p_gen,
    )


def model_summary(trained: TrainedModel) -> dict[str, str]:
    """Family, size and attention of the model, as the page's header shows them."""
    model_cfg = trained.cfg.model
    parameters = sum(p.numel() for p in trained.model.parameters())
    summary = {"family": model_cfg.family.value, "parameters": f"{parameters:,}"}
    if model_cfg.family.value == "transformer":
        summary["layers"] = f"{model_cfg.enc_layers} encoder, {model_cfg.dec_layers} decoder"
        summary["heads"] = str(model_cfg.heads)
        summary["d_model"] = str(model_cfg.d_model)
        summary["self-attention"] = model_cfg.attention.kind.value
    else:
        summary["decoder"] = model_cfg.decoder.value
        summary["hidden"] = str(model_cfg.hidden)
        summary["attention"] = model_cfg.attention.score.value
    if model_cfg.copy:
        summary["copy"] = "pointer-generator" + (" with coverage" if model_cfg.coverage else "")
    return summary


def _decoding_summary(
    trained: TrainedModel, src: str, settings: DecodingConfig, forced: bool
) -> dict[str, str]:
    """The decoding settings the header shows (the max length for this source's pieces)."""
    if forced:
        return {"output": "forced target (teacher forcing)"}
    source_length = len(trained.tokenizers.src.encode(src)[: trained.cfg.data.max_src_len])
    limit = max_output_lengths(
        torch.tensor([source_length]), settings.max_output_ratio, settings.max_output_extra
    )
    return {
        "output": "beam search" if settings.beam > 1 else "greedy search",
        "beam": str(settings.beam),
        "n-best": str(settings.nbest),
        "length penalty": f"{settings.length_penalty:g}",
        "max length": (
            f"{int(limit[0])} pieces ({settings.max_output_ratio:g} x {source_length} source "
            f"pieces + {settings.max_output_extra})"
        ),
    }
