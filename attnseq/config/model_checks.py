"""Cross-field rules of the model's options: the transformer's self-attention kinds, copy and
coverage, guided alignment, hard attention and the RNN attention's values. checks.py runs them
as part of `validate`."""

from attnseq.config.choices import (
    AttentionKind,
    AttentionValues,
    HardMode,
    Hierarchy,
    ModelFamily,
    Score,
    SparsePattern,
)
from attnseq.config.schema import TrainConfig


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
    if optim.coverage_lambda > 0 and not model.coverage:
        problems.append(
            f"optim.coverage_lambda={optim.coverage_lambda} needs model.coverage=true "
            "(there is no coverage vector to penalise)"
        )
    if trainer.coverage_penalty > 0 and rnn and score is Score.none:
        problems.append(
            "trainer.coverage_penalty needs attention: model.attention.score=none has none"
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
    on = f"model.attention.hierarchy={model.attention.hierarchy.name}"
    if model.family is not ModelFamily.rnn:
        return [f"{on} is RNN-only: use model.family=rnn (e.g. model=rnn_bahdanau)"]
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
        for key, value in (("attention.memory_slots", slots), ("conv_kernel", kernel)):
            if value:
                problems.append(
                    f"model.{key}={value} is a transformer option; RNN models have no "
                    f"self-attention or encoder layers to add it to (use model=transformer, or "
                    f"model.{key}=0)"
                )
        return problems
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
    if model.attention.hierarchy is not Hierarchy.none:
        problems.append(
            f"{on} is not supported with model.attention.hierarchy="
            f"{model.attention.hierarchy.name}: choose one of them"
        )
    if model.attention.memory_in_cross:
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
    on = "model.attention.values=embeddings"
    if model.family is not ModelFamily.rnn:
        return [f"{on} is RNN-only: use model.family=rnn (e.g. model=rnn_bahdanau)"]
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
