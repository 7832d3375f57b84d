"""Cross-field rules of the configuration: what the types of the schema (schema.py) cannot say.

`validate` runs before any work starts: `attnseq train` calls it on the composed config before
Hydra creates a run directory (hydra_entry.py), the train task again on the config it gets, and
`config_from_dict` on every config read back from a checkpoint or an `attnseq eval` override. It
raises one UserError that lists every problem, naming the keys involved and what would be valid.

`encoder_output_size`, the size of the RNN encoder's annotations that these keys imply, is also
what the model factory builds with (models/__init__.py).
"""

from pathlib import Path

from attnseq.config.schema import (
    CAUSAL_ATTENTION_KINDS,
    AttentionKind,
    ModelConfig,
    ModelFamily,
    Score,
    SparsePattern,
    TrainConfig,
)
from attnseq.errors import UserError


def encoder_output_size(model: ModelConfig) -> int:
    """Size of each RNN encoder annotation h_j (both directions concatenated)."""
    directions = 2 if model.rnn.bidirectional else 1
    if model.enc_hidden is None:
        return model.hidden
    return model.enc_hidden * directions


def validate(cfg: TrainConfig) -> None:
    """Cross-field rules a type cannot express; raises UserError naming the keys involved."""
    problems: list[str] = []
    model, trainer, data, optim = cfg.model, cfg.trainer, cfg.data, cfg.optim

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
        if model.attention.D < 1:
            problems.append(f"model.attention.D must be >= 1, got {model.attention.D}")
        if model.rnn.layers < 1:
            problems.append(f"model.rnn.layers must be >= 1, got {model.rnn.layers}")
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
        problems += _self_attention_problems(cfg)
    problems += _copy_problems(cfg)
    if not 0.0 <= model.dropout < 1.0:
        problems.append(f"model.dropout must be in [0, 1), got {model.dropout}")
    if optim.lr <= 0:
        problems.append(f"optim.lr must be > 0, got {optim.lr}")
    if not 0.0 <= optim.label_smoothing < 1.0:
        problems.append(f"optim.label_smoothing must be in [0, 1), got {optim.label_smoothing}")
    if trainer.max_epochs < 1:
        problems.append(f"trainer.max_epochs must be >= 1, got {trainer.max_epochs}")
    if trainer.max_steps is not None and trainer.max_steps < 1:
        problems.append(f"trainer.max_steps must be >= 1, got {trainer.max_steps}")
    if trainer.validate_every < 1:
        problems.append(f"trainer.validate_every must be >= 1, got {trainer.validate_every}")
    if trainer.beam < 1:
        problems.append(f"trainer.beam must be >= 1, got {trainer.beam}")
    if trainer.save_every_steps is not None and trainer.save_every_steps < 1:
        problems.append(
            f"trainer.save_every_steps must be >= 1 (or null), got {trainer.save_every_steps}"
        )
    if trainer.save_every_minutes is not None and not trainer.save_every_minutes > 0:
        problems.append(
            f"trainer.save_every_minutes must be > 0 (or null), got {trainer.save_every_minutes}"
        )
    if trainer.keep_last < 0:
        problems.append(f"trainer.keep_last must be >= 0 (0 = off), got {trainer.keep_last}")
    if trainer.num_workers < 0:
        problems.append(f"trainer.num_workers must be >= 0, got {trainer.num_workers}")
    if trainer.max_nonfinite_steps < 1:
        problems.append(
            f"trainer.max_nonfinite_steps must be >= 1, got {trainer.max_nonfinite_steps}"
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
    if data.max_tokens < 1:
        problems.append(f"data.max_tokens must be >= 1, got {data.max_tokens}")
    for split in ("train_size", "valid_size", "test_size"):
        if getattr(data, split) < 1:
            problems.append(f"data.{split} must be >= 1, got {getattr(data, split)}")
    if data.min_len < 1 or data.min_len > data.max_len:
        problems.append(
            f"data.min_len={data.min_len} and data.max_len={data.max_len}: need 1 <= min <= max"
        )
    if problems:
        raise UserError("invalid configuration:\n  - " + "\n  - ".join(problems))


def _self_attention_problems(cfg: TrainConfig) -> list[str]:
    """Rules for the transformer's model.attention.kind and its parameters."""
    attention, kind = cfg.model.attention, cfg.model.attention.kind
    problems = []
    if attention.decoder_self and kind.value not in CAUSAL_ATTENTION_KINDS:
        why = (
            "its projections mix every position, future ones included"
            if kind is AttentionKind.linformer
            else "its global tokens attend to, and are attended by, every position"
        )
        problems.append(
            f"model.attention.kind={kind.name} cannot be causal ({why}), so it cannot be used "
            "for decoder self-attention: set model.attention.decoder_self=false, or choose "
            f"one of {', '.join(CAUSAL_ATTENTION_KINDS)}"
        )
    if kind in (AttentionKind.local, AttentionKind.longformer) and attention.D < 1:
        problems.append(
            f"model.attention.D (the sliding window half-width) must be >= 1, got {attention.D}"
        )
    if kind is AttentionKind.strided:
        if attention.stride < 1:
            problems.append(f"model.attention.stride must be >= 1, got {attention.stride}")
        elif attention.pattern is SparsePattern.fixed and not (
            1 <= attention.summary <= attention.stride
        ):
            problems.append(
                f"model.attention.summary must be in 1..model.attention.stride="
                f"{attention.stride}, got {attention.summary}"
            )
    if kind is AttentionKind.longformer and attention.global_tokens < 0:
        problems.append(
            f"model.attention.global_tokens must be >= 0, got {attention.global_tokens}"
        )
    if kind is AttentionKind.linformer:
        if attention.proj_dim < 1:
            problems.append(f"model.attention.proj_dim must be >= 1, got {attention.proj_dim}")
        if cfg.data.max_src_len > cfg.model.max_positions:
            problems.append(
                f"model.attention.kind=linformer projects sequences of a fixed length "
                f"n = model.max_positions={cfg.model.max_positions}, shorter than "
                f"data.max_src_len={cfg.data.max_src_len}: raise model.max_positions or "
                "lower data.max_src_len"
            )
    if kind is AttentionKind.performer and attention.features < 1:
        problems.append(f"model.attention.features must be >= 1, got {attention.features}")
    return problems


def _copy_problems(cfg: TrainConfig) -> list[str]:
    """Rules of the pointer-generator, coverage and summarization decoding keys."""
    problems: list[str] = []
    model, optim, trainer = cfg.model, cfg.optim, cfg.trainer
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
    if optim.coverage_lambda < 0:
        problems.append(f"optim.coverage_lambda must be >= 0, got {optim.coverage_lambda}")
    elif optim.coverage_lambda > 0 and not model.coverage:
        problems.append(
            f"optim.coverage_lambda={optim.coverage_lambda} needs model.coverage=true "
            "(there is no coverage vector to penalise)"
        )
    if optim.coverage_start_step < 0:
        problems.append(f"optim.coverage_start_step must be >= 0, got {optim.coverage_start_step}")
    if trainer.min_output_length < 0:
        problems.append(f"trainer.min_output_length must be >= 0, got {trainer.min_output_length}")
    if trainer.no_repeat_ngram < 0:
        problems.append(f"trainer.no_repeat_ngram must be >= 0, got {trainer.no_repeat_ngram}")
    if trainer.coverage_penalty < 0:
        problems.append(
            f"trainer.coverage_penalty (beta) must be >= 0, got {trainer.coverage_penalty}"
        )
    elif trainer.coverage_penalty > 0 and rnn and score is Score.none:
        problems.append(
            "trainer.coverage_penalty needs attention: model.attention.score=none has none"
        )
    return problems
