"""The rules of the configuration's values in one place: every field's declared bounds and the
cross-field rules, run by `validate` (docs/internals/configuration.md)."""

import dataclasses
import functools
import math
import typing
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

from attnseq.config.choices import (
    AttentionKind,
    AttentionValues,
    DataSource,
    HardMode,
    Hierarchy,
    Metric,
    ModelFamily,
    Positions,
    Score,
    SentencePieceModel,
    SparsePattern,
    TaskType,
    TokenizerKind,
)
from attnseq.config.devices import check_device_name
from attnseq.config.schema import DecodingConfig, ModelConfig, TrainConfig
from attnseq.errors import UserError

# the positional encodings of one table row per position, up to model.max_positions
TABLE_POSITIONS = (Positions.learned, Positions.sinusoidal_split, Positions.sinusoidal_fairseq)
# those whose table keeps rows before position 0's (model.position_offset)
OFFSET_POSITIONS = (Positions.learned, Positions.sinusoidal_fairseq)


class ModelKey(NamedTuple):
    """One leaf `model.*` key, the family that alone reads it (None: both) and its default."""

    key: str
    family: ModelFamily | None
    default: Any


@functools.cache
def model_key_families() -> tuple[ModelKey, ...]:
    """Every leaf `model.*` key in declaration order, from the `family` of each schema field
    (`option(..., family=...)`; a node's family is its keys')."""
    return tuple(_model_keys(ModelConfig, "model.", None))


def _model_keys(node: type, prefix: str, family: ModelFamily | None) -> list[ModelKey]:
    found: list[ModelKey] = []
    for spec in dataclasses.fields(node):
        reader = spec.metadata.get("family", family)
        if spec.default_factory is not dataclasses.MISSING:
            default = spec.default_factory()
        else:
            default = spec.default
        if dataclasses.is_dataclass(default):
            found += _model_keys(type(default), f"{prefix}{spec.name}.", reader)
        else:
            found.append(ModelKey(f"{prefix}{spec.name}", reader, default))
    return found


def keys_unread_by(family: ModelFamily) -> frozenset[str]:
    """The `model.*` keys the other family alone reads: a model of `family` ignores them."""
    return frozenset(
        entry.key for entry in model_key_families() if entry.family not in (None, family)
    )


# What a family has in place of the other family's sizes and attention, for the messages.
_FAMILY_KEYS = {
    ModelFamily.rnn: (
        "RNN sizes: model.emb_dim, model.hidden, model.enc_hidden, model.rnn.layers",
        "RNN attention: model.attention.score, model.attention.window, model.attention.attn_dim",
    ),
    ModelFamily.transformer: (
        "transformer sizes: model.d_model, model.heads, model.ff_dim, model.enc_layers, "
        "model.dec_layers",
        "transformer attention: model.heads, model.attention.kind and its keys",
    ),
}
_FAMILY_NAMES = {ModelFamily.rnn: "an RNN", ModelFamily.transformer: "a transformer"}
_FAMILY_MODELS = {
    ModelFamily.rnn: "e.g. model=rnn_bahdanau",
    ModelFamily.transformer: "model=transformer",
}


def other_family_problems(cfg: TrainConfig) -> list[str]:
    """A `model.*` key that only the other family reads, set away from its schema default: the
    chosen family's model would silently ignore it. One line each, naming the key, the family
    and what to do."""
    family, problems = cfg.model.family, []
    for entry in model_key_families():
        if entry.family in (None, family):
            continue
        value: Any = cfg
        for name in entry.key.split("."):
            value = getattr(value, name)
        if value == entry.default:
            continue
        sizes, attention = _FAMILY_KEYS[family]
        instead = attention if entry.key.startswith("model.attention.") else sizes
        owner = entry.family
        problems.append(
            f"{entry.key}={_setting(value)} is {_FAMILY_NAMES[owner]} setting; model.family="
            f"{family.name} does not read it: leave it at its default "
            f"({_setting(entry.default)}) or choose {_FAMILY_NAMES[owner]}, "
            f"{_FAMILY_MODELS[owner]} ({instead})"
        )
    return problems


def _setting(value: Any) -> str:
    """A value as a config file spells it: enum names, true/false, null."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def self_attention_problems(cfg: TrainConfig) -> list[str]:
    """Rules for the transformer's model.attention.kind and its parameters."""
    attention, kind = cfg.model.attention, cfg.model.attention.kind
    problems = []
    if attention.decoder_self and not kind.causal:
        why = (
            "its projections mix every position, future ones included"
            if kind is AttentionKind.linformer
            else "its global tokens attend to, and are attended by, every position"
        )
        causal_kinds = ", ".join(member.name for member in AttentionKind if member.causal)
        problems.append(
            f"model.attention.kind={kind.name} cannot be causal ({why}), so it cannot be used "
            "for decoder self-attention: set model.attention.decoder_self=false, or choose "
            f"one of {causal_kinds}"
        )
    fixed = kind is AttentionKind.strided and attention.pattern is SparsePattern.fixed
    if fixed and attention.summary > attention.stride:
        problems.append(
            f"model.attention.summary must be in 1..model.attention.stride="
            f"{attention.stride}, got {attention.summary}"
        )
    if kind is AttentionKind.bigbird and attention.block_size > cfg.data.max_src_len:
        problems.append(bigbird_block_problem(cfg))
    if kind is AttentionKind.linformer and cfg.data.max_src_len > cfg.model.max_positions:
        problems.append(
            f"model.attention.kind=linformer projects sequences of a fixed length "
            f"n = model.max_positions={cfg.model.max_positions}, shorter than "
            f"data.max_src_len={cfg.data.max_src_len}: raise model.max_positions or "
            "lower data.max_src_len"
        )
    return problems


def bigbird_block_problem(cfg: TrainConfig) -> str:
    """Why a BigBird block longer than the longest source is refused, not clamped.

    No source is longer than data.max_src_len (longer ones are truncated or dropped), so with
    b > max_src_len every sequence is one block: the window, global and random blocks that
    make BigBird are gone, and what trains is full attention computed on b x b blocks padded
    far past the sequence. Clamping b to max_src_len would keep the run's memory sane but
    still train full attention under the name bigbird, with a block size in the checkpoint
    that the model never used; a user who set b meant a block pattern, so the config is
    refused with the range that gives one (or kind=full, which is what b >= the length is)."""
    attention, longest = cfg.model.attention, cfg.data.max_src_len
    return (
        f"model.attention.block_size={attention.block_size} is longer than the longest "
        f"source (data.max_src_len={longest}): every sequence would be one block, which is "
        f"full attention on padded blocks; use a block_size in 1..{longest} (a few blocks "
        "per sequence), or model.attention.kind=full"
    )


def copy_problems(cfg: TrainConfig) -> list[str]:
    """Rules of the pointer-generator, coverage and summarization decoding keys."""
    problems: list[str] = []
    model, optim = cfg.model, cfg.optim
    rnn = model.family is ModelFamily.rnn
    score, window = model.attention.score, model.attention.window.name
    for key, on in (("copy", model.copy), ("coverage", model.coverage)):
        if not (on and rnn):
            continue
        if score is Score.none:
            problems.append(
                f"model.{key}=true needs attention: model.attention.score=none has none; "
                "use e.g. model.attention.score=additive"
            )
        elif window != "global":
            # local_p weights do not sum to one (Luong eq. 10), local_m rows can be all zero:
            # neither is a distribution over the source to copy from or to accumulate
            problems.append(f"model.{key}=true needs model.attention.window=global, got {window}")
    if model.coverage and rnn and score not in (Score.none, Score.additive, Score.concat):
        problems.append(
            f"model.coverage=true feeds the coverage vector into the additive score "
            f"(See et al. 2017, eq. 11): needs model.attention.score=additive or concat, "
            f"got {score.name}"
        )
    in_stack = -model.dec_layers <= model.copy_layer < model.dec_layers
    if not rnn and (model.copy or model.coverage) and not in_stack:
        problems.append(
            f"model.copy_layer={model.copy_layer} is not a decoder layer: with "
            f"model.dec_layers={model.dec_layers} use 0..{model.dec_layers - 1} or "
            f"-{model.dec_layers}..-1 (-1 = the last)"
        )
    if optim.coverage_lambda > 0 and not model.coverage:
        problems.append(
            f"optim.coverage_lambda={optim.coverage_lambda} needs model.coverage=true "
            "(there is no coverage vector to penalise)"
        )
    if cfg.decoding.coverage_penalty > 0 and rnn and score is Score.none:
        problems.append(
            "decoding.coverage_penalty needs attention: model.attention.score=none has none"
        )
    return problems


def alignment_problems(cfg: TrainConfig) -> list[str]:
    """Rules of guided alignment: gold links for the training split, and a model whose forward
    pass returns the supervised attention (data/guided_alignment.py checks the files)."""
    model, optim = cfg.model, cfg.optim
    if optim.alignment_lambda == 0:
        return []
    on = f"optim.alignment_lambda={optim.alignment_lambda}"
    problems: list[str] = []
    if "train" not in cfg.data.alignments:
        problems.append(
            f"{on} needs word alignments of the training pairs: data.alignments.train=FILE "
            "(Pharaoh links i-j, one line per pair; scripts/make_alignments.py writes them)"
        )
    if model.copy or model.coverage:
        problems.append(f"{on} is not supported with model.copy or model.coverage")
    if model.family is ModelFamily.rnn:
        score, window = model.attention.score, model.attention.window.name
        if score is Score.none:
            problems.append(f"{on} needs attention: model.attention.score=none has none")
        elif window != "global":
            # local_p weights do not sum to one and local_m rows can be all zero: neither is a
            # distribution over the source to compare with the gold one
            problems.append(f"{on} needs model.attention.window=global, got {window}")
        return problems
    if not -model.dec_layers <= model.alignment_layer < model.dec_layers:
        problems.append(
            f"model.alignment_layer={model.alignment_layer} is not a decoder layer: with "
            f"model.dec_layers={model.dec_layers} use 0..{model.dec_layers - 1} or "
            f"-{model.dec_layers}..-1 (-1 = the last)"
        )
    head = model.alignment_head
    if head is not None and head >= model.heads:
        problems.append(
            f"model.alignment_head={head} is not a head: model.heads={model.heads} has "
            f"0..{model.heads - 1} (or null: the mean of the layer's heads)"
        )
    return problems


def hierarchy_problems(cfg: TrainConfig) -> list[str]:
    """Rules of hierarchical attention: an RNN with a global content score to combine."""
    model = cfg.model
    if model.attention.hierarchy is Hierarchy.none:
        return []
    if model.family is not ModelFamily.rnn:
        return []  # a transformer does not read it (other_family_problems)
    on = f"model.attention.hierarchy={model.attention.hierarchy.name}"
    score, window = model.attention.score, model.attention.window.name
    problems: list[str] = []
    if score in (Score.none, Score.location):
        # location scores positions, not annotations: it cannot score segments
        problems.append(
            f"{on} needs a content score for words and segments: model.attention.score="
            f"{score.name}; use additive, dot, general, concat or scaled_dot"
        )
    if window != "global":
        problems.append(f"{on} needs model.attention.window=global, got {window}")
    return problems


def memory_and_convolution_problems(cfg: TrainConfig) -> list[str]:
    """Rules of persistent memory (model.attention.memory_slots, memory_in_cross) and of the
    encoder's convolution sublayer (model.conv_kernel): transformer only, full attention under
    the memory, an odd kernel, and cross-attention weights that stay a distribution over the
    source where copy, coverage or guided alignment need one."""
    model, attention = cfg.model, cfg.model.attention
    slots, kernel = attention.memory_slots, model.conv_kernel
    problems: list[str] = []
    if model.family is ModelFamily.rnn:
        return []  # an RNN does not read them (other_family_problems)
    if kernel and kernel % 2 == 0:
        problems.append(
            f"model.conv_kernel={kernel} must be odd (k // 2 positions on each side keep the "
            f"length): use e.g. {kernel - 1} or {kernel + 1}, or 0 for no convolution"
        )
    if attention.memory_in_cross and not slots:
        problems.append(
            "model.attention.memory_in_cross=true needs memory slots: set "
            "model.attention.memory_slots=N (N >= 1)"
        )
    if slots and attention.kind is not AttentionKind.full:
        problems.append(
            f"model.attention.memory_slots={slots} needs model.attention.kind=full, got "
            f"{attention.kind.name}: the efficient kinds' patterns cover sequence positions "
            "only"
        )
    needs_distribution = [
        key
        for key, on in (
            ("model.copy", model.copy),
            ("model.coverage", model.coverage),
            (f"optim.alignment_lambda={cfg.optim.alignment_lambda}", cfg.optim.alignment_lambda),
        )
        if on
    ]
    if slots and attention.memory_in_cross and needs_distribution:
        problems.append(
            f"model.attention.memory_in_cross=true cannot be combined with "
            f"{', '.join(needs_distribution)}: the memory slots take part of the "
            "cross-attention, which then is no distribution over the source"
        )
    return problems


def hard_attention_problems(cfg: TrainConfig) -> list[str]:
    """Rules of hard attention (attention/hard.py): it replaces a global softmax over the
    source, so it needs one, and what reads that softmax as a distribution cannot use it."""
    model, hard = cfg.model, cfg.model.attention.hard
    if hard is HardMode.none:
        if model.attention.hard_k != 1:
            return [
                f"model.attention.hard_k={model.attention.hard_k} chooses positions for hard "
                "attention: set model.attention.hard=gumbel or reinforce (or leave hard_k=1)"
            ]
        return []
    on = f"model.attention.hard={hard.name}"
    problems: list[str] = []
    if model.family is ModelFamily.rnn:
        score, window = model.attention.score, model.attention.window.name
        if score is Score.none:
            problems.append(f"{on} needs attention: model.attention.score=none has none")
        if window != "global":
            problems.append(
                f"{on} chooses from the global softmax over the source: needs "
                f"model.attention.window=global, got {window} (local windows are not supported)"
            )
    for key, value in (("model.copy", model.copy), ("model.coverage", model.coverage)):
        if value:
            # both read the attention as a distribution over the source (the copy distribution,
            # the coverage vector); hard attention's k-hot weights are not one
            problems.append(f"{on} is not supported with {key}=true: set one of them off")
    if cfg.optim.alignment_lambda > 0:
        problems.append(
            f"{on} is not supported with guided alignment (optim.alignment_lambda="
            f"{cfg.optim.alignment_lambda}): its k-hot weights have no log-probability to "
            "supervise; set optim.alignment_lambda=0"
        )
    rnn = model.family is ModelFamily.rnn
    if rnn and model.attention.hierarchy is not Hierarchy.none:
        problems.append(
            f"{on} is not supported with model.attention.hierarchy="
            f"{model.attention.hierarchy.name}: choose one of them"
        )
    if not rnn and model.attention.memory_in_cross:
        problems.append(
            f"{on} chooses source positions; model.attention.memory_in_cross=true adds memory "
            "slots to the cross-attention: set it false"
        )
    return problems


def attention_values_problems(cfg: TrainConfig) -> list[str]:
    """Rules of `model.attention.values=embeddings` (models/rnn.py): the values of a flat RNN
    attention, soft or hard; the models that read the annotations themselves cannot take it."""
    model = cfg.model
    if model.attention.values is AttentionValues.annotations:
        return []
    if model.family is not ModelFamily.rnn:
        return []  # a transformer does not read it (other_family_problems)
    on = "model.attention.values=embeddings"
    problems: list[str] = []
    if model.attention.score is Score.none:
        problems.append(f"{on} is what attention reads: model.attention.score=none has none")
    for key, on_value in (
        ("model.copy", model.copy),
        ("model.coverage", model.coverage),
        (
            f"model.attention.hierarchy={model.attention.hierarchy.name}",
            model.attention.hierarchy is not Hierarchy.none,
        ),
    ):
        if on_value:
            problems.append(f"{on} is not supported with {key}: it reads the annotations")
    return problems


def encoder_output_size(model: ModelConfig) -> int:
    """Size of each RNN encoder annotation h_j (both directions concatenated): what the keys
    imply and what the model factory builds with (attnseq/models/__init__.py)."""
    directions = 2 if model.rnn.bidirectional else 1
    if model.enc_hidden is None:
        return model.hidden
    return model.enc_hidden * directions


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38

# Validation metrics each task computes (`task_metrics`, attnseq/evaluation/metrics.py)
TASK_METRICS = {
    TaskType.translation: (Metric.loss, Metric.ppl, Metric.bleu, Metric.chrf, Metric.exact_match),
    TaskType.summarization: (
        Metric.loss,
        Metric.ppl,
        Metric.rouge1,
        Metric.rouge2,
        Metric.rouge_l,
        Metric.exact_match,
    ),
}


def field_problems(node: Any, prefix: str = "") -> list[str]:
    """The schema's per-field rules: every number finite and within the bounds its `option`
    declares, every list of the declared length, the string of an `int | str` field one of its
    `words`; one "key must ..., got VALUE" line each."""
    problems: list[str] = []
    for spec in dataclasses.fields(node):
        key, value = f"{prefix}{spec.name}", getattr(node, spec.name)
        words = spec.metadata.get("words")
        if dataclasses.is_dataclass(value):
            problems += field_problems(value, f"{key}.")
        elif words and isinstance(value, str) and value not in words:
            problems.append(f"{key} must be {number_or_words(spec)}, got {value!r}")
        elif value is not None and not isinstance(value, bool | str | Enum | dict):
            problem = value_problem(value, spec.metadata)
            if problem:
                problems.append(f"{key} {problem}, got {value!r}")
    return problems


def number_or_words(spec: dataclasses.Field) -> str:
    """What an `int | str` field takes, e.g. "a whole number >= 1, auto or null"."""
    choices = [f"a whole number {bounds_text(spec.metadata)}".rstrip(), *spec.metadata["words"]]
    if type(None) in typing.get_args(spec.type):
        choices.append("null")
    return ", ".join(choices[:-1]) + " or " + choices[-1]


def bounds_text(metadata: Any) -> str:
    """The bounds of a field as text, e.g. ">= 0 and < 1" (empty without bounds)."""
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    return " and ".join(f"{words[k]} {_number(metadata[k])}" for k in words if k in metadata)


def _number(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def value_problem(value: Any, metadata: Any) -> str | None:
    """What is wrong with one value (a number or a list of numbers), or None."""
    if isinstance(value, list):
        length = metadata.get("length")
        if length is not None and len(value) != length:
            return f"must have {length} values"
        for item in value:
            problem = value_problem(item, metadata)
            if problem:
                return f"must hold numbers {bounds_text(metadata)}".rstrip()
        return None
    if isinstance(value, float) and not math.isfinite(value):
        bounds = bounds_text(metadata)
        return f"must be a finite number{' ' + bounds if bounds else ''}"
    if isinstance(value, float) and abs(value) > FLOAT32_MAX:
        # floats meet tensors (learning rates, penalties) as 32-bit floats
        return f"must fit in a 32-bit float (at most {FLOAT32_MAX:.4g} in size)"
    wider = metadata.get("le", 0) > INT64_MAX  # e.g. a generator's seed, up to 2**64 - 1
    if isinstance(value, int) and not wider and not INT64_MIN <= value <= INT64_MAX:
        # integers meet torch tensors (comparisons, lengths) as 64-bit integers; a field whose
        # bounds allow more is checked against its bounds below
        return "must fit in a 64-bit integer"
    failed = (
        ("ge" in metadata and not value >= metadata["ge"])
        or ("gt" in metadata and not value > metadata["gt"])
        or ("le" in metadata and not value <= metadata["le"])
        or ("lt" in metadata and not value < metadata["lt"])
    )
    return f"must be {bounds_text(metadata)}" if failed else None


def validate(cfg: TrainConfig, *, run_start: bool = True) -> None:
    """Every rule of the configuration's values; raises one UserError naming the keys involved
    (one line for one problem). `run_start=False` for a config read back from a checkpoint:
    keys of the other model family are then let through, as its model ignores them."""
    # Per-field bounds first: the cross-field rules below assume them (e.g. heads >= 1), and
    # the cross-field rules of a family read only that family's keys.
    problems = field_problems(cfg) + device_problems(cfg)
    if not problems and run_start:
        problems = other_family_problems(cfg)
    if not problems:
        problems = cross_field_problems(cfg)
    if len(problems) == 1:
        raise UserError(f"invalid configuration: {problems[0]}")
    if problems:
        raise UserError("invalid configuration:\n  - " + "\n  - ".join(problems))


def device_problems(cfg: TrainConfig) -> list[str]:
    """`trainer.device` spelled as torch spells devices (config/devices.py); whether this
    machine has it is checked where the run starts (`resolve_device`)."""
    try:
        check_device_name(cfg.trainer.device, "trainer.device")
    except UserError as problem:
        return [str(problem)]
    return []


def cross_field_problems(cfg: TrainConfig) -> list[str]:
    """Rules that involve more than one key (or a key and the files it names)."""
    problems: list[str] = []
    model = cfg.model
    if model.family is ModelFamily.rnn:
        directions = 2 if model.rnn.bidirectional else 1
        if model.enc_hidden is None and model.hidden % directions:
            problems.append(
                f"model.hidden={model.hidden} must be even for a bidirectional encoder "
                "(each direction gets hidden/2), or set model.enc_hidden"
            )
        same_size = encoder_output_size(model) == model.hidden
        if model.attention.score in (Score.dot, Score.scaled_dot) and not same_size:
            problems.append(
                f"model.attention.score={model.attention.score.name} needs encoder outputs "
                f"({encoder_output_size(model)}) of the decoder's size "
                f"(model.hidden={model.hidden});"
                " use score=general or concat, or leave model.enc_hidden unset"
            )
        if model.attention.score is Score.none and model.attention.window.name != "global":
            problems.append("model.attention.window needs attention: model.attention.score=none")
    else:
        if model.d_model % model.heads:
            problems.append(
                f"model.d_model={model.d_model} is not divisible by model.heads={model.heads}"
            )
        problems += self_attention_problems(cfg)
        if model.position_offset and model.positions not in OFFSET_POSITIONS:
            problems.append(
                f"model.position_offset={model.position_offset} shifts the rows of a position "
                f"table (learned or sinusoidal_fairseq), but model.positions="
                f"{model.positions.name} has none: set model.position_offset=0"
            )
    problems += copy_problems(cfg)
    problems += alignment_problems(cfg)
    problems += hierarchy_problems(cfg)
    problems += memory_and_convolution_problems(cfg)
    problems += hard_attention_problems(cfg)
    problems += attention_values_problems(cfg)
    if cfg.resume is not None and cfg.trainer.overwrite:
        problems.append(
            f"resume={cfg.resume} continues a run and trainer.overwrite=true replaces one: "
            "give only one of them"
        )
    if cfg.resume is not None and cfg.resume != "auto":
        # Checked here so that `attnseq train` stops before Hydra creates a run directory;
        # whether the file really is a resumable checkpoint is checked when it is loaded.
        resume = Path(cfg.resume).expanduser()
        if not resume.is_file():
            problems.append(
                f"resume={cfg.resume}: no such file; give the path of a checkpoint "
                "(RUN_DIR/checkpoints/last.pt) or resume=auto with hydra.run.dir=RUN_DIR"
            )
    problems += _data_problems(cfg)
    problems += _subword_sampling_problems(cfg)
    problems += _decoding_problems(cfg)
    return problems


def _subword_sampling_problems(cfg: TrainConfig) -> list[str]:
    """data.spm_sampling_alpha and data.bpe_dropout: a sentencepiece model of the matching type,
    and no feature that fixes the training segmentation in advance."""
    data = cfg.data
    keys = [
        (key, value, kind)
        for key, value, kind in (
            ("data.spm_sampling_alpha", data.spm_sampling_alpha, SentencePieceModel.unigram),
            ("data.bpe_dropout", data.bpe_dropout, SentencePieceModel.bpe),
        )
        if value > 0
    ]
    problems: list[str] = []
    for key, value, kind in keys:
        setting = f"{key}={value}"
        if data.tokenizer is not TokenizerKind.sentencepiece:
            problems.append(
                f"{setting} resamples sentencepiece segmentations; data.tokenizer="
                f"{data.tokenizer.name} has only one segmentation (use data.tokenizer="
                f"sentencepiece data.spm_model_type={kind.name}, or set {key}=0)"
            )
        elif data.spm_model_type is not kind:
            other = (
                "data.bpe_dropout"
                if kind is SentencePieceModel.unigram
                else ("data.spm_sampling_alpha")
            )
            problems.append(
                f"{setting} needs data.spm_model_type={kind.name}, got "
                f"{data.spm_model_type.name} (for a {data.spm_model_type.name} model use "
                f"{other})"
            )
        if cfg.model.copy:
            problems.append(
                f"{setting} cannot be combined with model.copy=true: the copy model's "
                "extended vocabulary is built from one fixed segmentation"
            )
        if cfg.optim.alignment_lambda > 0:
            problems.append(
                f"{setting} cannot be combined with optim.alignment_lambda: the gold word "
                "links are mapped onto one fixed segmentation of the training pairs"
            )
    return problems


def _data_problems(cfg: TrainConfig) -> list[str]:
    """Rules between data.* keys, and between the task and its validation metric."""
    data, metric = cfg.data, cfg.trainer.early_stopping_metric
    problems: list[str] = []
    if data.min_len > data.max_len:
        problems.append(
            f"data.min_len={data.min_len} and data.max_len={data.max_len}: need 1 <= min <= max"
        )
    elif data.source is DataSource.generated and data.name in ("reverse", "copy", "sort"):
        space = _symbol_space(data.vocab_size, data.min_len, data.max_len)
        held_out = data.valid_size + data.test_size
        if space is not None and held_out > space:
            problems.append(
                f"data.valid_size + data.test_size = {held_out} distinct sources, but "
                f"data.vocab_size={data.vocab_size} with lengths {data.min_len}..{data.max_len} "
                f"has only {space}: lower the split sizes or widen vocab_size/lengths"
            )
    for key in ("src_lang_code", "tgt_lang_code"):
        code = getattr(data, key)
        if code is not None and (not code or any(char.isspace() for char in code)):
            problems.append(
                f"data.{key}={code!r} is no language code (one word, e.g. en, eng_Latn, en_XX)"
            )
    if metric not in TASK_METRICS[data.task]:
        valid = ", ".join(m.name for m in TASK_METRICS[data.task])
        problems.append(
            f"trainer.early_stopping_metric={metric.name} is not computed for "
            f"data.task={data.task.name}; valid: {valid}"
        )
    return problems


def _symbol_space(vocab_size: int, min_len: int, max_len: int) -> int | None:
    """Distinct symbol sequences with these lengths; None when beyond 2**64 (never too few)."""
    if vocab_size == 1:
        return max_len - min_len + 1
    if max_len * math.log2(vocab_size) > 64:
        return None
    return sum(vocab_size**length for length in range(min_len, max_len + 1))


def decoding_problems(decoding: DecodingConfig, prefix: str = "decoding.") -> list[str]:
    """The rules between decoding settings (each field's bounds are `field_problems`'): one
    line each, the settings named `prefix` + field (as `attnseq.decoding` checks them too)."""
    problems: list[str] = []
    beam, nbest = f"{prefix}beam", f"{prefix}nbest"
    if decoding.sample and (decoding.beam != 1 or decoding.nbest != 1):
        problems.append(
            f"{prefix}sample draws its outputs: it takes {beam}=1 and {nbest}=1, got "
            f"{decoding.beam} and {decoding.nbest} ({prefix}num_samples draws several)"
        )
    elif decoding.nbest > decoding.beam:
        problems.append(
            f"{nbest}={decoding.nbest} is more than {beam}={decoding.beam}: a beam search "
            f"keeps beam outputs; raise {beam} or lower {nbest}"
        )
    return problems


def _decoding_problems(cfg: TrainConfig) -> list[str]:
    """Rules of the decoding settings, the output length limit, and of positions the model has
    parameters for."""
    model, data, decoding = cfg.model, cfg.data, cfg.decoding
    problems = decoding_problems(decoding)
    if decoding.max_output_extra == 0 and decoding.max_output_ratio < 1:
        problems.append(
            f"decoding.max_output_ratio={decoding.max_output_ratio} with "
            "decoding.max_output_extra=0 leaves a one-token source no output token: "
            "raise max_output_extra (or the ratio to >= 1)"
        )
    transformer = model.family is ModelFamily.transformer
    if transformer and model.positions in TABLE_POSITIONS:
        longest_output = math.floor(data.max_src_len * decoding.max_output_ratio)
        longest = max(
            data.max_src_len, data.max_tgt_len, longest_output + decoding.max_output_extra
        )
        if longest + 1 > model.max_positions:
            problems.append(
                f"model.positions={model.positions.name} has model.max_positions="
                f"{model.max_positions} "
                f"positions, but sequences reach {longest + 1} (data.max_src_len="
                f"{data.max_src_len}, data.max_tgt_len={data.max_tgt_len}, the decoding limit "
                "decoding.max_output_ratio * source + decoding.max_output_extra, plus BOS): "
                "raise model.max_positions or lower those"
            )
    location = model.attention.score is Score.location
    if not transformer and location and data.max_src_len > model.max_positions:
        problems.append(
            f"model.attention.score=location has one weight row per source position up to "
            f"model.max_positions={model.max_positions}, shorter than data.max_src_len="
            f"{data.max_src_len}: raise model.max_positions or lower data.max_src_len"
        )
    return problems
