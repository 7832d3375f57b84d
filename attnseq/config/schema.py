"""Typed configuration: the schema of every key `attnseq train` accepts.

These dataclasses are registered in Hydra's ConfigStore (`register_configs`) as the schema under
train.yaml, so Hydra composes YAML files *into* them: struct mode rejects unknown keys,
values are type-checked, and choices are Enums (OmegaConf validates an Enum field by member name
and lists the valid names when one is wrong). Cross-field rules that a type cannot express live
in checks.py (`validate`), which runs before any work starts.

Library code receives these dataclasses (via `OmegaConf.to_object`), never a DictConfig.
"""

from dataclasses import dataclass, field
from enum import Enum

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
    """What to train on (the data/ group)."""

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
    """Both families share one schema; keys of the other family are ignored (the model/ group)."""

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
    log_every: int = 100  # updates between train/* scalars and training log lines
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
    # Also keep each of the last N saves of last.pt as checkpoints/step_STEP.pt (full
    # checkpoints, hard links where possible) for `attnseq average`; older ones are deleted.
    # 0 = off: each one holds the optimizer state too, so N of a large model take real disk.
    keep_last: int = 0
    # Non-finite losses (or gradients) skip their update; this many in a row stop the run with
    # exit status 1, leaving the checkpoints at the last good state.
    max_nonfinite_steps: int = 10


@dataclass
class TrainConfig:
    """The root of `attnseq train` (train.yaml)."""

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
    """Register the schema so train.yaml can name it in its defaults list."""
    from hydra.core.config_store import ConfigStore  # only the CLI path needs Hydra

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


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

    # imported here: checks.py imports the schema from this module
    from attnseq.config.checks import validate

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
