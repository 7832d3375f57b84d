"""Typed configuration: the schema of every key `attnseq train` accepts.

These dataclasses are registered in Hydra's ConfigStore (`register_configs`) as the schema under
configs/train.yaml, so Hydra composes YAML files *into* them: struct mode rejects unknown keys,
values are type-checked, and choices are Enums (OmegaConf validates an Enum field by member name
and lists the valid names when one is wrong). Cross-field rules that a type cannot express live
in `validate`, which runs before any work starts.

Library code receives these dataclasses (via `OmegaConf.to_object`), never a DictConfig.
"""

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from attnseq.errors import UserError


# ----------------------------------------------------------------------------------- choices
class DataSource(Enum):
    generated = "generated"  # built in (attnseq/data/generated.py), no download
    local = "local"  # files under data.root read through the `datasets` library
    hub = "hub"  # a Hugging Face hub dataset (needs the network the first time)


class FileFormat(Enum):
    parallel = "parallel"  # PREFIX.SRC_LANG + PREFIX.TGT_LANG, one sentence per line
    tsv = "tsv"  # src<TAB>tgt per line (columns chosen by src_field/tgt_field as 0/1)
    jsonl = "jsonl"  # one JSON object per line, fields src_field/tgt_field


class TaskType(Enum):
    translation = "translation"  # BLEU, chrF
    summarization = "summarization"  # ROUGE


class TokenizerKind(Enum):
    char = "char"
    word = "word"
    sentencepiece = "sentencepiece"


class SentencePieceModel(Enum):
    bpe = "bpe"
    unigram = "unigram"


class ModelFamily(Enum):
    rnn = "rnn"
    transformer = "transformer"


class DecoderStyle(Enum):
    bahdanau = "bahdanau"  # attend from s_{i-1}, context fed into the RNN step
    luong = "luong"  # attend from h_t, attentional state tanh(W_c [c_t; h_t])


class RNNCell(Enum):
    gru = "gru"
    lstm = "lstm"


class DecoderInit(Enum):
    """The RNN decoder's initial state s_0 (Joey NMT's `init_hidden`)."""

    bridge = "bridge"  # tanh(W_s summary): Bahdanau et al. 2015, appendix A.2.2
    zero = "zero"  # s_0 = 0: the decoder sees the source only through attention


class Score(Enum):
    additive = "additive"
    dot = "dot"
    general = "general"
    concat = "concat"
    location = "location"
    scaled_dot = "scaled_dot"
    none = "none"  # no attention: the fixed-vector encoder-decoder baseline


# "global" is a Python keyword, so this Enum uses the functional API.
Window = Enum("Window", {"global": "global", "local_m": "local_m", "local_p": "local_p"})


class AttentionKind(Enum):
    """Transformer self-attention mechanism (attnseq/attention/efficient.py)."""

    full = "full"  # softmax(QK^T/sqrt(d))V over all pairs (Vaswani et al. 2017)
    local = "local"  # sliding window +-D (sliding_window.py)
    strided = "strided"  # Child et al. 2019 strided/fixed sparse patterns (strided.py)
    longformer = "longformer"  # window +-D plus global tokens, Beltagy et al. 2020; encoder only
    linformer = "linformer"  # E K, F V: proj_dim rows, Wang et al. 2020; encoder only
    linear = "linear"  # elu(x)+1 feature map, Katharopoulos et al. 2020
    performer = "performer"  # FAVOR+ random features, Choromanski et al. 2021


class SparsePattern(Enum):
    strided = "strided"  # |i-j| <= stride or (i-j) mod stride = 0
    fixed = "fixed"  # same block of `stride`, or one of the last `summary` cells of a block


# kinds whose mechanism has a causal form, usable for decoder self-attention
# (model.attention.decoder_self=true)
CAUSAL_ATTENTION_KINDS = ("full", "local", "strided", "linear", "performer")


class Norm(Enum):
    pre = "pre"
    post = "post"


class Positions(Enum):
    sinusoidal = "sinusoidal"
    learned = "learned"


class OptimizerName(Enum):
    adam = "adam"
    adamw = "adamw"


class Scheduler(Enum):
    constant = "constant"  # lr fixed after the optional linear warm-up
    inverse_sqrt = "inverse_sqrt"  # Noam / Vaswani et al. 2017 eq. 3 shape, peak = optim.lr
    plateau = "plateau"  # multiply by plateau_factor when the validation metric stalls
    cosine = "cosine"  # cosine decay to 0 over the training budget (steps, epochs or minutes)
    linear = "linear"  # linear decay to 0 over the training budget


class Device(Enum):
    auto = "auto"  # cuda if available, else cpu
    cpu = "cpu"
    cuda = "cuda"


class Precision(Enum):
    """trainer.precision (attnseq/mixed_precision.py). `trainer.precision=32` selects fp32 by
    its value; bf16 and fp16 by name."""

    fp32 = 32  # float32 everywhere
    bf16 = "bf16"  # autocast to bfloat16
    fp16 = "fp16"  # autocast to float16 with dynamic loss scaling


class Metric(Enum):
    """Validation metrics usable for early stopping and model selection."""

    loss = "loss"
    ppl = "ppl"
    bleu = "bleu"
    chrf = "chrf"
    exact_match = "exact_match"
    rouge1 = "rouge1"
    rouge2 = "rouge2"
    rouge_l = "rouge_l"

    @property
    def higher_is_better(self) -> bool:
        return self not in (Metric.loss, Metric.ppl)


# ----------------------------------------------------------------------------------- groups
@dataclass
class DataConfig:
    """What to train on (configs/data/)."""

    name: str = "dates"  # generated: dates|reverse|copy|sort|toy_translation; else a label
    source: DataSource = DataSource.generated
    task: TaskType = TaskType.translation
    tokenizer: TokenizerKind = TokenizerKind.char
    # --- generated tasks
    train_size: int = 20000  # examples per split
    valid_size: int = 500
    test_size: int = 500
    min_len: int = 3  # symbol tasks: sequence length range
    max_len: int = 12
    vocab_size: int = 20  # symbol tasks: alphabet size
    # --- real corpora (source=local or hub)
    root: str | None = None  # local files resolve against this; None = $ATTNSEQ_DATA or ./data
    format: FileFormat = FileFormat.parallel
    splits: dict[str, str] = field(default_factory=dict)  # split -> path prefix / file / hub split
    src_lang: str = "src"  # parallel files: suffix of the source file (train.de)
    tgt_lang: str = "tgt"
    src_field: str = "src"  # jsonl/hub: field names (dotted for nested: translation.de)
    tgt_field: str = "tgt"
    hub_name: str | None = None  # e.g. bentrevett/multi30k
    hub_config: str | None = None
    max_src_len: int = 256  # tokens; longer sources: truncated (summarization) or dropped
    max_tgt_len: int = 256  # tokens; longer targets are dropped
    max_examples: int | None = None  # use only the first N training examples
    # --- sentencepiece (tokenizer=sentencepiece)
    spm_vocab_size: int = 8000
    spm_model_type: SentencePieceModel = SentencePieceModel.bpe
    spm_character_coverage: float = 1.0
    spm_joint: bool = True  # one model for source and target
    # --- batching
    max_tokens: int = 4096  # batch budget in padded tokens (length-bucketed batches)
    max_sentences: int | None = None  # optional cap on sentences per batch
    eval_max_tokens: int = 8192  # batch budget for validation/test decoding


@dataclass
class RNNConfig:
    cell: RNNCell = RNNCell.gru
    layers: int = 1
    bidirectional: bool = True
    init_hidden: DecoderInit = DecoderInit.bridge


@dataclass
class AttentionConfig:
    """RNN attention (score, window, D, attn_dim) and the transformer's self-attention
    mechanism (kind and the keys after it); keys of the other family are ignored."""

    score: Score = Score.additive
    window: Window = Window["global"]  # type: ignore[valid-type]
    # Local half-width: Luong local attention's window = 2D+1 source positions (RNN); the
    # sliding window of transformer self-attention, kind=local and longformer: |i-j| <= D
    D: int = 5
    attn_dim: int | None = None  # additive/concat hidden size; None = model.hidden
    # --- transformer self-attention (cross-attention is always full)
    kind: AttentionKind = AttentionKind.full
    decoder_self: bool = False  # also decoder self-attention (causal kinds, see below)
    stride: int = 8  # strided: the stride l of Child et al.'s patterns
    pattern: SparsePattern = SparsePattern.strided  # strided: which of the two patterns
    summary: int = 1  # strided, pattern=fixed: summary cells c per block (1..stride)
    global_tokens: int = 1  # longformer: the first N source positions attend and are attended
    proj_dim: int = 64  # linformer: k, rows the keys/values are projected to (n = max_positions)
    features: int = 128  # performer: m, random features per head


@dataclass
class ModelConfig:
    """Both families share one schema; keys of the other family are ignored (configs/model/)."""

    family: ModelFamily = ModelFamily.rnn
    # --- RNN encoder-decoder
    decoder: DecoderStyle = DecoderStyle.bahdanau
    emb_dim: int = 64
    hidden: int = 128  # decoder hidden size
    enc_hidden: int | None = None  # per direction; None = hidden / directions (outputs = hidden)
    input_feeding: bool = True  # Luong: feed h~_{t-1} into the next step
    rnn: RNNConfig = field(default_factory=RNNConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    # --- transformer
    d_model: int = 256
    heads: int = 4
    enc_layers: int = 3
    dec_layers: int = 3
    ff_dim: int = 1024
    norm: Norm = Norm.pre
    positions: Positions = Positions.sinusoidal
    attention_dropout: float = 0.0
    max_positions: int = 1024  # learned positions; linformer's sequence length n
    # --- both
    dropout: float = 0.1
    tie_embeddings: bool = True  # output projection shares the target embedding
    # --- pointer-generator and coverage (See et al. 2017; attnseq/models/copy.py)
    copy: bool = False  # mix a copy distribution over the source into the output (p_gen)
    coverage: bool = False  # coverage vector: RNN: fed to the attention score; both: its loss
    copy_layer: int = -1  # transformer: decoder layer whose head-averaged cross-attention copies


@dataclass
class OptimConfig:
    name: OptimizerName = OptimizerName.adam
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0
    clip_norm: float = 1.0  # max global gradient norm; 0 disables clipping
    scheduler: Scheduler = Scheduler.constant
    warmup_steps: int = 0
    label_smoothing: float = 0.0
    plateau_factor: float = 0.5
    plateau_patience: int = 2  # validations without improvement before the lr drops
    # coverage loss weight lambda (See et al. 2017, eq. 13); needs model.coverage=true
    coverage_lambda: float = 0.0
    # the coverage loss counts from this update on (See et al. add it for the last phase only)
    coverage_start_step: int = 0


@dataclass
class TrainerConfig:
    max_epochs: int = 20
    max_steps: int | None = None  # stop after this many updates (or max_epochs, if sooner)
    max_minutes: float | None = None  # wall-clock budget for the training loop
    device: Device = Device.auto
    threads: int | None = None  # torch intra-op threads; None = torch's default
    precision: Precision = Precision.fp32  # 32 | bf16 | fp16 (autocast; fp16 scales the loss)
    compile: bool = False  # torch.compile the model for training (validation stays eager)
    num_workers: int = 0  # DataLoader processes collating batches; 0 = in the training process
    pin_memory: bool = True  # on CUDA: page-locked batches, copied without blocking
    validate_every: int = 250  # steps between validations (and at the end of training)
    log_every: int = 25  # steps between train/* scalars
    early_stopping_metric: Metric = Metric.exact_match
    early_stopping_patience: int = 5  # validations without improvement; 0 disables
    early_stopping_target: float | None = None  # stop as soon as the metric reaches this value
    num_heatmaps: int = 3  # fixed validation examples drawn to TensorBoard
    beam: int = 1  # beam size for validation and the final test evaluation
    length_penalty: float = 1.0  # GNMT alpha for beam search (0 = raw log-probability)
    max_output_ratio: float = 1.5  # decode at most ratio * source length + max_output_extra
    max_output_extra: int = 10
    min_output_length: int = 0  # no EOS before this many output tokens
    no_repeat_ngram: int = 0  # forbid any n-gram of this size twice in an output (0 = off)
    # beta of the GNMT coverage penalty at beam search (Wu et al. 2016, eq. 14; 0 = off)
    coverage_penalty: float = 0.0
    progress: bool = True  # progress bar on a terminal
    # --- resume points: last.pt is also written at every validation and when training stops
    save_every_steps: int | None = None  # write last.pt every N updates; None = off
    save_every_minutes: float | None = 10.0  # write last.pt when this long since the last save
    # Non-finite losses (or gradients) skip their update; this many in a row stop the run with
    # exit status 1, leaving the checkpoints at the last good state.
    max_nonfinite_steps: int = 10


@dataclass
class TrainConfig:
    """The root of `attnseq train` (configs/train.yaml)."""

    seed: int = 1
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    name: str = "default"  # a label for the run, shown in logs and metrics.json
    # metrics.json key the task function returns to a sweeper (e.g. Optuna); None = the
    # test value of trainer.early_stopping_metric
    optimized_metric: str | None = None
    # Continue a run: "auto" = the run directory's checkpoints/last.pt (a fresh run when there
    # is none), or the path of a checkpoint. seed, data.*, model.* and optim.* must match the
    # checkpoint's (see `resume_conflicts`); trainer.* may change (e.g. a larger max_steps).
    resume: str | None = None


def register_configs() -> None:
    """Register the schema so configs/train.yaml can name it in its defaults list."""
    from hydra.core.config_store import ConfigStore  # only the CLI path needs Hydra

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


# ------------------------------------------------------------------------------- validation
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


# ------------------------------------------------------------------------------------ resume
# A resumed run takes its settings from the command line, but these keys decide the model, its
# vocabulary, the training data and its order, and the meaning of the optimizer, scheduler and
# best-metric state stored in the checkpoint: a different value would silently train something
# else than the checkpoint's run, so they must match.
RESUME_MUST_MATCH = ("seed", "data.", "model.", "optim.", "trainer.early_stopping_metric")
# ...except where a different value changes nothing about what is trained: where the data
# files live, and the batch size of validation decoding.
RESUME_MAY_DIFFER = ("data.root", "data.eval_max_tokens")


def resume_conflicts(saved: TrainConfig, current: TrainConfig) -> list[str]:
    """Keys that must match between a checkpoint's config and a resumed run's, and do not:
    one "key: checkpoint VALUE, now VALUE" line each."""

    def flat(cfg: TrainConfig) -> dict[str, object]:
        values: dict[str, object] = {}

        def walk(prefix: str, node: object) -> None:
            if isinstance(node, dict) and node:
                for key, value in node.items():
                    walk(f"{prefix}{key}.", value)
            else:
                values[prefix.rstrip(".")] = node

        walk("", config_to_dict(cfg))
        return values

    before, now = flat(saved), flat(current)
    conflicts = []
    for key in sorted(set(before) | set(now)):
        if (
            key.startswith(RESUME_MUST_MATCH)
            and not key.startswith(RESUME_MAY_DIFFER)
            and before.get(key) != now.get(key)
        ):
            conflicts.append(f"{key}: checkpoint {before.get(key)!r}, now {now.get(key)!r}")
    return conflicts


# --------------------------------------------------------------------------- (de)serialising
def config_to_dict(cfg: TrainConfig) -> dict:
    """Plain dict (enums as their names) for checkpoints and metrics.json."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)  # type: ignore[return-value]


def config_from_dict(values: dict, overrides: list[str] | None = None) -> TrainConfig:
    """Rebuild a TrainConfig from `config_to_dict` output, checked against the schema.

    `overrides` are dotlist strings ("data.valid_size=100") applied on top, as `attnseq eval`
    accepts them. Unknown keys or bad values raise UserError.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), values)
        if overrides:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(overrides))
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise UserError(f"invalid configuration: {describe_omegaconf_error(error)}") from None
    assert isinstance(cfg, TrainConfig)
    validate(cfg)
    return cfg


def describe_omegaconf_error(error: Exception) -> str:
    """One readable line for an OmegaConf validation error, naming the key."""
    key = getattr(error, "full_key", None)
    message = str(error).split("\n")[0]
    return f"{key}: {message}" if key else message
