"""The rules of the configuration's values, in one place: the bounds each schema field declares
(`option(..., ge=1)` in schema.py), enforced for every field by walking the dataclasses, plus the
cross-field rules a single field's bounds cannot say.

`validate` runs before any work starts: `attnseq train` calls it on the composed config before
Hydra creates a run directory (hydra_entry.py), the train task again on the config it gets, and
`config_from_dict` on every config read back from a checkpoint or an `attnseq eval` override. It
raises one UserError that lists every problem, naming the keys involved and what would be valid.

`encoder_output_size`, the size of the RNN encoder's annotations that these keys imply, is also
what the model factory builds with (models/__init__.py).
"""

import dataclasses
import math
from enum import Enum
from pathlib import Path
from typing import Any

from attnseq.config.choices import (
    AttentionKind,
    DataSource,
    Metric,
    ModelFamily,
    Positions,
    Score,
    SentencePieceModel,
    TaskType,
    TokenizerKind,
)
from attnseq.config.model_checks import (
    alignment_problems,
    attention_values_problems,
    copy_problems,
    hard_attention_problems,
    hierarchy_problems,
    memory_and_convolution_problems,
    self_attention_problems,
)
from attnseq.config.schema import ModelConfig, TrainConfig
from attnseq.errors import UserError


def encoder_output_size(model: ModelConfig) -> int:
    """Size of each RNN encoder annotation h_j (both directions concatenated)."""
    directions = 2 if model.rnn.bidirectional else 1
    if model.enc_hidden is None:
        return model.hidden
    return model.enc_hidden * directions


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38

# Validation metrics each task computes (evaluation.py, metrics.task_metrics)
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
    declares, every list of the declared length; one "key must ..., got VALUE" line each."""
    problems: list[str] = []
    for spec in dataclasses.fields(node):
        key, value = f"{prefix}{spec.name}", getattr(node, spec.name)
        if dataclasses.is_dataclass(value):
            problems += field_problems(value, f"{key}.")
        elif value is not None and not isinstance(value, bool | str | Enum | dict):
            problem = value_problem(value, spec.metadata)
            if problem:
                problems.append(f"{key} {problem}, got {value!r}")
    return problems


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
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        # integers meet torch tensors (comparisons, lengths) as 64-bit integers
        return "must fit in a 64-bit integer"
    failed = (
        ("ge" in metadata and not value >= metadata["ge"])
        or ("gt" in metadata and not value > metadata["gt"])
        or ("le" in metadata and not value <= metadata["le"])
        or ("lt" in metadata and not value < metadata["lt"])
    )
    return f"must be {bounds_text(metadata)}" if failed else None


def validate(cfg: TrainConfig) -> None:
    """Every rule of the configuration's values; raises one UserError naming the keys involved
    (one line for one problem)."""
    # Per-field bounds first: the cross-field rules below assume them (e.g. heads >= 1).
    problems = field_problems(cfg)
    if not problems:
        problems = cross_field_problems(cfg)
    if len(problems) == 1:
        raise UserError(f"invalid configuration: {problems[0]}")
    if problems:
        raise UserError("invalid configuration:\n  - " + "\n  - ".join(problems))


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
        if model.attention.kind is not AttentionKind.full:
            problems.append(
                f"model.attention.kind={model.attention.kind.name} is a transformer "
                "self-attention mechanism; RNN models choose model.attention.score/window "
                "(use model=transformer, or model.attention.kind=full)"
            )
    else:
        if model.d_model % model.heads:
            problems.append(
                f"model.d_model={model.d_model} is not divisible by model.heads={model.heads}"
            )
        problems += self_attention_problems(cfg)
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


def _decoding_problems(cfg: TrainConfig) -> list[str]:
    """Rules of the output length limit, and of positions the model has parameters for."""
    model, data, trainer = cfg.model, cfg.data, cfg.trainer
    problems: list[str] = []
    if trainer.max_output_extra == 0 and trainer.max_output_ratio < 1:
        problems.append(
            f"trainer.max_output_ratio={trainer.max_output_ratio} with "
            "trainer.max_output_extra=0 leaves a one-token source no output token: "
            "raise max_output_extra (or the ratio to >= 1)"
        )
    transformer = model.family is ModelFamily.transformer
    if transformer and model.positions is Positions.learned:
        longest_output = math.floor(data.max_src_len * trainer.max_output_ratio)
        longest = max(data.max_src_len, data.max_tgt_len, longest_output + trainer.max_output_extra)
        if longest + 1 > model.max_positions:
            problems.append(
                f"model.positions=learned has model.max_positions={model.max_positions} "
                f"positions, but sequences reach {longest + 1} (data.max_src_len="
                f"{data.max_src_len}, data.max_tgt_len={data.max_tgt_len}, the decoding limit "
                "trainer.max_output_ratio * source + trainer.max_output_extra, plus BOS): raise "
                "model.max_positions or lower those"
            )
    location = model.attention.score is Score.location
    if not transformer and location and data.max_src_len > model.max_positions:
        problems.append(
            f"model.attention.score=location has one weight row per source position up to "
            f"model.max_positions={model.max_positions}, shorter than data.max_src_len="
            f"{data.max_src_len}: raise model.max_positions or lower data.max_src_len"
        )
    return problems
