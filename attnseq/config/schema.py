"""Typed configuration: one dataclass per group of keys, each field declared with `option` (its
default, help and bounds); Hydra composes the YAML files into them (struct mode)."""

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any

from attnseq.config.choices import (
    Activation,
    AttentionKind,
    AttentionValues,
    CheckpointUpload,
    DataSource,
    DecoderInit,
    DecoderStyle,
    FileFormat,
    HardMode,
    HeatmapScale,
    Hierarchy,
    Metric,
    ModelFamily,
    Norm,
    OptimizerName,
    Positions,
    Precision,
    RNNCell,
    Scheduler,
    Score,
    SentencePieceModel,
    SparsePattern,
    TaskType,
    TokenizerKind,
    Tracker,
    Window,
)
from attnseq.errors import UserError


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    length: int | None = None,
    words: tuple[str, ...] | None = None,
    family: ModelFamily | None = None,
) -> Any:
    """A schema field: its default, its help text and the bounds checks.py enforces.

    ge/gt/le/lt bound a number (or every item of a list) as >=, >, <=, <; `length` is the number
    of items a list must have; `words` are the strings an `int | str` field takes besides its
    numbers (e.g. ("auto",)). A float field is always checked to be finite as well; None (for
    an optional field) is always allowed. `family` marks a `model.*` key (or a whole node) that
    only that model family reads; a key without one is read by both (checks.py refuses a
    changed key of the other family when a run starts, reference.py labels the key).
    """
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt, "length": length, "words": words}
    bounds["family"] = family
    metadata = {"help": help, **{key: value for key, value in bounds.items() if value is not None}}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# data.*: what to train on


@dataclass
class DataConfig:
    """What to train on (the data/ group)."""

    name: str = option("dates", "generated: dates|reverse|copy|sort|toy_translation; else a label")
    source: DataSource = option(
        DataSource.generated, "where the data comes from: generated, local files or the hub"
    )
    task: TaskType = option(
        TaskType.translation, "translation (BLEU, chrF) or summarization (ROUGE)"
    )
    tokenizer: TokenizerKind = option(TokenizerKind.char, "char, word or sentencepiece")
    # --- generated tasks
    train_size: int = option(20000, "examples per split", ge=1)
    valid_size: int = option(500, "validation examples (generated tasks)", ge=1)
    test_size: int = option(500, "test examples (generated tasks)", ge=1)
    min_len: int = option(3, "symbol tasks: sequence length range", ge=1)
    max_len: int = option(12, "symbol tasks: longest sequence", ge=1)
    vocab_size: int = option(20, "symbol tasks: alphabet size", ge=1)
    # --- real corpora (source=local or hub)
    root: str | None = option(
        None, "local files resolve against this; None = $ATTNSEQ_DATA or ./data"
    )
    format: FileFormat = option(FileFormat.parallel, "local files: parallel, tsv or jsonl")
    splits: dict[str, str] = option(
        help="split -> path prefix / file / hub split", default_factory=dict
    )
    alignments: dict[str, str] = option(
        help="guided alignment: split -> Pharaoh file of word links (i-j, 0-based, source word"
        " first), one line per pair of the split as loaded (after held-out valid/test and"
        " max_examples); relative paths resolve like data.splits; needs at least train",
        default_factory=dict,
    )
    src_lang: str = option("src", "parallel files: suffix of the source file (train.de)")
    tgt_lang: str = option("tgt", "parallel files: suffix of the target file (train.en)")
    src_lang_code: str | None = option(
        None,
        "a multilingual pretrained model's source language, its code as the model's tokenizer"
        " spells it (M2M100 en, NLLB eng_Latn, mBART-50 en_XX), the token every source starts"
        " with; None = the tokenizer's own (tokenizer_config.json's src_lang)",
    )
    tgt_lang_code: str | None = option(
        None,
        "a multilingual pretrained model's target language (spelt as data.src_lang_code): the"
        " first token of every target and output (it sets decoding.forced_first_token); None ="
        " the tokenizer's own (tokenizer_config.json's tgt_lang)",
    )
    src_field: str = option("src", "jsonl/hub: field names (dotted for nested: translation.de)")
    tgt_field: str = option("tgt", "jsonl/hub: the target field")
    hub_name: str | None = option(None, "e.g. bentrevett/multi30k")
    hub_config: str | None = option(None, "the hub dataset's configuration name, if it has several")
    max_src_len: int = option(
        256, "tokens; longer sources: truncated (summarization) or dropped", ge=1
    )
    max_tgt_len: int = option(256, "tokens; longer targets are dropped", ge=1)
    max_examples: int | None = option(None, "use only the first N training examples", ge=1)
    verify: bool = option(
        False,
        "check each prepared cache file's checksum when it is mapped (reads every byte once; "
        "its size, rows and token ids are checked on every run)",
    )
    prepare_workers: int | None = option(
        None,
        "processes that encode a long split when the cache is prepared, each holding a chunk "
        "of 50,000 pairs and the tokenizers; None = one per core",
        ge=1,
    )
    # --- sentencepiece (tokenizer=sentencepiece)
    spm_vocab_size: int = option(8000, "sentencepiece vocabulary size", ge=8)
    spm_model_type: SentencePieceModel = option(
        SentencePieceModel.bpe, "sentencepiece model: bpe or unigram"
    )
    spm_character_coverage: float = option(
        1.0, "share of characters the sentencepiece model covers (0.98 to 1)", ge=0.98, le=1.0
    )
    spm_joint: bool = option(True, "one model for source and target")
    spm_input_sentence_size: int = option(
        1_000_000,
        "sentencepiece trains on a uniform sample of this many training texts, streamed to the"
        " trainer (0: every text, else > 100); as Marian's and fairseq's --input_sentence_size",
        ge=0,
    )
    spm_sampling_alpha: float = option(
        0.0,
        "unigram models: subword regularization, training split resegmented every epoch "
        "(smoothing alpha over all segmentations; 0: off, 0.2 to 0.5 typical)",
        ge=0.0,
        le=1.0,
    )
    bpe_dropout: float = option(
        0.0,
        "bpe models: BPE-dropout, the probability of dropping each merge when the training "
        "split is resegmented every epoch (0: off, 0.1 typical)",
        ge=0.0,
        lt=1.0,
    )
    # --- batching
    max_tokens: int = option(4096, "batch budget in padded tokens (length-bucketed batches)", ge=1)
    max_sentences: int | None = option(None, "optional cap on sentences per batch", ge=1)
    eval_max_tokens: int = option(8192, "batch budget for validation/test decoding", ge=1)


# model.*: the model family, its sizes and its attention

# the family of a model key that one family alone reads: `option(..., family=RNN)`
RNN, TRANSFORMER = ModelFamily.rnn, ModelFamily.transformer


@dataclass
class RNNConfig:
    cell: RNNCell = option(RNNCell.gru, "gru or lstm")
    layers: int = option(1, "stacked RNN layers in the encoder and the decoder", ge=1)
    bidirectional: bool = option(True, "bidirectional encoder")
    init_hidden: DecoderInit = option(
        DecoderInit.bridge, "decoder initial state: bridge (from the encoder) or zero"
    )


@dataclass
class AttentionConfig:
    """RNN attention (score, window, attn_dim, hierarchy, values) and the transformer's
    self-attention mechanism (kind and the keys after it); D, hard and hard_k serve both
    families. Each key's `family` says which family reads it (see ModelConfig)."""

    score: Score = option(Score.additive, "attention score (none = no attention)", family=RNN)
    window: Window = option(  # type: ignore[valid-type]
        Window["global"], "attention window: global, local_m or local_p (Luong)", family=RNN
    )
    D: int = option(
        5,
        "Local half-width: Luong local attention's window = 2D+1 source positions (RNN); the "
        "sliding window of transformer self-attention, kind=local and longformer: |i-j| <= D",
        ge=1,
    )
    attn_dim: int | None = option(
        None, "additive/concat hidden size; None = model.hidden", ge=1, family=RNN
    )
    hierarchy: Hierarchy = option(
        Hierarchy.none,
        "sentence = segment attention x word attention (Nallapati et al. 2016); segments "
        "are speaker turns (#Person1#: ...) or sentences",
        family=RNN,
    )
    max_segments: int = option(
        64, "hierarchy: most segments per source; later text joins the last one", ge=1, family=RNN
    )
    hard: HardMode = option(
        HardMode.none,
        "hard attention (RNN attention, transformer cross-attention): gumbel or reinforce"
        " training, argmax at evaluation; none = soft",
    )
    hard_k: int = option(1, "hard attention: source positions chosen per step (top-k)", ge=1)
    values: AttentionValues = option(
        AttentionValues.annotations,
        "what the context reads: annotations (h_j) or embeddings (each source word and "
        "its position alone; the keys stay h_j), so a hard choice reads the word it points at",
        family=RNN,
    )
    # --- transformer self-attention (cross-attention is always full)
    scaled: bool = option(
        True,
        "divide every attention's q.k by sqrt(d_k) (Vaswani et al. 2017, section 3.2.1); "
        "false = unscaled dot products, whose softmax saturates as d_k grows",
        family=TRANSFORMER,
    )
    kind: AttentionKind = option(AttentionKind.full, "self-attention mechanism", family=TRANSFORMER)
    decoder_self: bool = option(
        False, "also decoder self-attention (causal kinds, see below)", family=TRANSFORMER
    )
    stride: int = option(
        8, "strided: the stride l of Child et al.'s patterns", ge=1, family=TRANSFORMER
    )
    pattern: SparsePattern = option(
        SparsePattern.strided, "strided: which of the two patterns", family=TRANSFORMER
    )
    summary: int = option(
        1, "strided, pattern=fixed: summary cells c per block (1..stride)", ge=1, family=TRANSFORMER
    )
    global_tokens: int = option(
        1,
        "longformer: the first N source positions attend and are attended",
        ge=0,
        family=TRANSFORMER,
    )
    proj_dim: int = option(
        64,
        "linformer: k, rows the keys/values are projected to (n = max_positions)",
        ge=1,
        family=TRANSFORMER,
    )
    features: int = option(128, "performer: m, random features per head", ge=1, family=TRANSFORMER)
    block_size: int = option(16, "bigbird: b, positions per block", ge=1, family=TRANSFORMER)
    window_blocks: int = option(
        1,
        "bigbird: w, neighbour blocks on each side of a query's block (3-block window: 1)",
        ge=0,
        family=TRANSFORMER,
    )
    global_blocks: int = option(
        1,
        "bigbird: g, the first g blocks attend to and are attended by every position",
        ge=0,
        family=TRANSFORMER,
    )
    random_blocks: int = option(
        2, "bigbird: r, random key blocks per query block", ge=0, family=TRANSFORMER
    )
    pattern_seed: int = option(
        0,
        "bigbird: seed of the random blocks (layer l uses seed + l): one fixed pattern",
        ge=0,
        family=TRANSFORMER,
    )
    # --- persistent memory (Sukhbaatar et al. 2019), any transformer attention
    memory_slots: int = option(
        0,
        "N learned key/value vectors per head appended to every self-attention (0 = off)",
        ge=0,
        family=TRANSFORMER,
    )
    memory_in_cross: bool = option(
        False, "memory_slots also in cross-attention", family=TRANSFORMER
    )


@dataclass
class ModelConfig:
    """Both families share one schema (the model/ group). A key marked with a `family` is read
    by that family's models alone, a key without one by both: checks.py refuses a key of the
    other family set away from its default when a run starts (a checkpoint's config keeps
    loading: the model never reads the key)."""

    family: ModelFamily = option(ModelFamily.rnn, "rnn or transformer")
    init_from: str | None = option(
        None,
        "start a new run from pretrained weights: an attnseq checkpoint (.pt) or run directory,"
        " a Hugging Face model folder or hf:ORG/NAME[@REVISION]. The model.* keys and the"
        " tokenizers come from it (a model.* key given that contradicts it is refused; dropout"
        " and the guided-alignment layer and head may change); the optimizer, schedule and step"
        " start fresh. None = random initialisation",
    )
    # --- RNN encoder-decoder
    decoder: DecoderStyle = option(DecoderStyle.bahdanau, "decoder: bahdanau or luong", family=RNN)
    emb_dim: int = option(64, "token embedding size", ge=1, family=RNN)
    hidden: int = option(128, "decoder hidden size", ge=1, family=RNN)
    enc_hidden: int | None = option(
        None, "per direction; None = hidden / directions (outputs = hidden)", ge=1, family=RNN
    )
    input_feeding: bool = option(True, "Luong: feed h~_{t-1} into the next step", family=RNN)
    rnn: RNNConfig = option(
        help="RNN cell, layers and direction", default_factory=RNNConfig, family=RNN
    )
    attention: AttentionConfig = option(help="attention mechanism", default_factory=AttentionConfig)
    # --- transformer
    d_model: int = option(256, "model width", ge=1, family=TRANSFORMER)
    heads: int = option(4, "attention heads; must divide d_model", ge=1, family=TRANSFORMER)
    enc_layers: int = option(3, "encoder layers", ge=1, family=TRANSFORMER)
    dec_layers: int = option(3, "decoder layers", ge=1, family=TRANSFORMER)
    ff_dim: int = option(1024, "feed-forward inner size", ge=1, family=TRANSFORMER)
    norm: Norm = option(Norm.pre, "pre or post layer normalisation", family=TRANSFORMER)
    positions: Positions = option(
        Positions.sinusoidal,
        "sinusoidal or learned positional encodings; sinusoidal_split: sin in the first half"
        " of the channels and cos in the second (Marian), a table of max_positions rows;"
        " sinusoidal_fairseq: fairseq's halves of frequencies exp(-i log(10000) / (half - 1))"
        " (M2M100, NLLB), a table of max_positions + position_offset rows",
        family=TRANSFORMER,
    )
    attention_dropout: float = option(
        0.0, "dropout on attention weights, in [0, 1)", ge=0.0, lt=1.0, family=TRANSFORMER
    )
    # both: the transformer's learned positions and linformer's n, the RNN's location score
    max_positions: int = option(
        1024,
        "transformer: learned positions, linformer's sequence length n; RNN: the source "
        "positions of attention.score=location",
        ge=1,
    )
    conv_kernel: int = option(
        0,
        "odd k: a depthwise-separable convolution sublayer (Conformer) after each encoder"
        " layer's self-attention (0 = off)",
        ge=0,
        family=TRANSFORMER,
    )
    # --- transformer: the switches pretrained encoder-decoders need (models/pretrained.py)
    activation: Activation = option(
        Activation.relu,
        "feed-forward nonlinearity: relu (Vaswani et al. 2017), gelu, gelu_tanh (its tanh"
        " approximation) or silu (swish)",
        family=TRANSFORMER,
    )
    activation_dropout: float | None = option(
        None,
        "dropout on the feed-forward hidden activations, in [0, 1); None = model.dropout",
        ge=0.0,
        lt=1.0,
        family=TRANSFORMER,
    )
    scale_embeddings: bool = option(
        True,
        "multiply token embeddings by sqrt(d_model) (Vaswani et al. 2017, section 3.4);"
        " false: unscaled (Marian's scale_embedding=false)",
        family=TRANSFORMER,
    )
    output_bias: bool = option(
        False, "a bias on the output projection (Marian's final_logits_bias)", family=TRANSFORMER
    )
    position_offset: int = option(
        0,
        "learned or sinusoidal_fairseq positions: position p reads row p + offset of a table"
        " of max_positions + offset rows (BART's and M2M100's 2); 0 = row p",
        ge=0,
        family=TRANSFORMER,
    )
    embed_norm: bool = option(
        False,
        "a LayerNorm on the token embeddings plus positions, before their dropout, in the"
        " encoder and the decoder (BART's layernorm_embedding)",
        family=TRANSFORMER,
    )
    # --- both
    dropout: float = option(0.1, "dropout probability, in [0, 1)", ge=0.0, lt=1.0)
    tie_embeddings: bool = option(True, "output projection shares the target embedding")
    share_src_tgt_embeddings: bool | None = option(
        None,
        "one embedding matrix for source and target (equal vocabulary sizes); None = when one"
        " tokenizer serves both sides and tie_embeddings is true",
    )
    # --- pointer-generator and coverage (See et al. 2017; attnseq/models/pointer_generator.py)
    copy: bool = option(False, "mix a copy distribution over the source into the output (p_gen)")
    coverage: bool = option(
        False, "coverage vector: RNN: fed to the attention score; both: its loss"
    )
    copy_layer: int = option(
        -1, "decoder layer whose head-averaged cross-attention copies", family=TRANSFORMER
    )
    # --- guided alignment (Garg et al. 2019; optim.alignment_lambda)
    alignment_layer: int = option(
        -1,
        "decoder layer whose cross-attention guided alignment supervises (-1 ="
        " the last; Garg et al. 2019 supervise the penultimate, -2)",
        family=TRANSFORMER,
    )
    alignment_head: int | None = option(
        None,
        "the supervised head of that layer, 0-based; None = the mean of its heads",
        ge=0,
        family=TRANSFORMER,
    )


# optim.*: the optimizer, the learning-rate schedule and the loss terms


@dataclass
class OptimConfig:
    name: OptimizerName = option(OptimizerName.adam, "adam or adamw")
    lr: float = option(1e-3, "peak learning rate", gt=0.0)
    betas: list[float] = option(
        help="Adam's beta1 and beta2, each in [0, 1)",
        default_factory=lambda: [0.9, 0.999],
        ge=0.0,
        lt=1.0,
        length=2,
    )
    accumulate: int = option(
        1,
        "micro-batches per update: gradients of N batches summed and normalised by their"
        " target tokens together, the update of one batch N times as large",
        ge=1,
    )
    ema_decay: float = option(
        0.0,
        "exponential moving average of the weights (decay in [0, 1); 0 = off): validation,"
        " best.pt and the saved model use the average; about 1 / (1 - decay) updates averaged",
        ge=0.0,
        lt=1.0,
    )
    weight_decay: float = option(0.0, "weight decay (decoupled for adamw)", ge=0.0)
    clip_norm: float = option(1.0, "max global gradient norm; 0 disables clipping", ge=0.0)
    scheduler: Scheduler = option(Scheduler.constant, "learning-rate schedule after the warm-up")
    warmup_steps: int = option(0, "updates of linear learning-rate warm-up (0 = none)", ge=0)
    label_smoothing: float = option(0.0, "label smoothing epsilon, in [0, 1)", ge=0.0, lt=1.0)
    plateau_factor: float = option(
        0.5, "scheduler=plateau: lr multiplier when the metric stalls, in (0, 1)", gt=0.0, lt=1.0
    )
    plateau_patience: int = option(2, "validations without improvement before the lr drops", ge=1)
    coverage_lambda: float = option(
        0.0,
        "coverage loss weight lambda (See et al. 2017, eq. 13); needs model.coverage=true",
        ge=0.0,
    )
    coverage_start_step: int = option(
        0,
        "the coverage loss counts from this update on (See et al. add it for the last phase only)",
        ge=0,
    )
    alignment_lambda: float = option(
        0.0,
        "guided alignment loss weight (Garg et al. 2019): cross entropy between the gold links of"
        " data.alignments and model.alignment_layer/alignment_head's attention; 0 = off",
        ge=0.0,
    )
    gumbel_tau_start: float = option(
        1.0, "model.attention.hard=gumbel: Gumbel-softmax temperature at update 0", gt=0.0
    )
    gumbel_tau_end: float = option(
        0.5, "model.attention.hard=gumbel: the temperature after the anneal", gt=0.0
    )
    gumbel_anneal_steps: int = option(
        2000,
        "model.attention.hard=gumbel: updates of the exponential anneal from tau_start to"
        " tau_end (0 = tau_end from the start)",
        ge=0,
    )
    reinforce_lambda: float = option(
        1.0, "model.attention.hard=reinforce: weight lambda_r of the REINFORCE term", ge=0.0
    )
    reinforce_entropy: float = option(
        0.01, "model.attention.hard=reinforce: entropy bonus weight lambda_e", ge=0.0
    )
    reinforce_baseline_decay: float = option(
        0.9,
        "model.attention.hard=reinforce: the moving-average baseline keeps this share of its"
        " value per update (Xu et al. 2015: 0.9)",
        ge=0.0,
        lt=1.0,
    )


# trainer.*: the training loop, validation, checkpoints and budgets


@dataclass
class TrainerConfig:
    max_epochs: int = option(20, "stop after this many passes over the training data", ge=1)
    max_steps: int | None = option(
        None, "stop after this many updates (or max_epochs, if sooner)", ge=1
    )
    max_minutes: float | None = option(None, "wall-clock budget for the training loop", gt=0.0)
    device: str = option(
        "auto",
        "auto (cuda when there is one, else cpu), cpu, cuda, cuda:N or mps: torch's spelling",
    )
    threads: int | str | None = option(
        None,
        "torch intra-op CPU threads: N (at most the usable cores), auto (the cores no other "
        "process keeps busy: the result then depends on the machine's load) or None = torch's "
        "default capped at the usable cores (the same whatever else runs)",
        ge=1,
        words=("auto",),
    )
    precision: Precision = option(
        Precision.fp32, "32 | bf16 | fp16 (autocast; fp16 scales the loss)"
    )
    compile: bool = option(False, "torch.compile the model for training (validation stays eager)")
    tf32: bool = option(
        False,
        "CUDA, Ampere and later: float32 matmuls and convolutions in TF32 (10-bit mantissa, "
        "~5e-4 relative error per product, up to ~8x faster); false keeps float32 arithmetic",
    )
    num_workers: int = option(
        0, "DataLoader processes collating batches; 0 = in the training process", ge=0
    )
    pin_memory: bool = option(True, "on CUDA: page-locked batches, copied without blocking")
    validate_every: int = option(
        250, "steps between validations (and at the end of training)", ge=1
    )
    log_every: int | str = option(
        "auto",
        "updates between train/* scalars and training log lines: N, or auto = about 20 lines"
        " over the run's budget (max_steps, or max_epochs in updates), at least one every 100"
        " updates",
        ge=1,
        words=("auto",),
    )
    early_stopping_metric: Metric = option(
        Metric.exact_match, "validation metric for early stopping and best.pt"
    )
    early_stopping_patience: int = option(5, "validations without improvement; 0 disables", ge=0)
    early_stopping_target: float | None = option(
        None, "stop as soon as the metric reaches this value"
    )
    num_heatmaps: int = option(3, "fixed validation examples drawn to TensorBoard", ge=0)
    heatmap_scale: HeatmapScale = option(
        HeatmapScale.shared,
        "colour scale of a validation's heatmaps: shared (one for all of its figures, so that"
        " they compare) or per_figure (each from 0 to its own largest weight)",
    )
    progress: bool = option(True, "progress bar on a terminal")
    # --- resume points: last.pt is also written at every validation and when training stops
    save_every_steps: int | None = option(None, "write last.pt every N updates; None = off", ge=1)
    save_every_minutes: float | None = option(
        10.0, "write last.pt when this long since the last save", gt=0.0
    )
    keep_last: int = option(
        0,
        "also keep each of the last N saves of last.pt as checkpoints/step_STEP.pt (full"
        " checkpoints, hard links where possible) for `attnseq average`; older ones are deleted."
        " 0 = off: each one holds the optimizer state too, so N of a large model take real disk",
        ge=0,
    )
    overwrite: bool = option(
        False,
        "Replace the run in the run directory: a fresh run there is refused while it holds one"
        " (checkpoints, metrics.json, hyps, tb, eval). With true, those of the old run are deleted"
        " once the new run has its data and model, so none of them mixes with the new run's.",
    )
    max_nonfinite_steps: int = option(
        10,
        "Non-finite losses (or gradients) skip their update; this many in a row stop the run with"
        " exit status 1, leaving the checkpoints at the last good state.",
        ge=1,
    )


# decoding.*: how a run's validation and test evaluation decode, and by default `attnseq eval`,
# `attnseq translate` and the Python API: a search (beam, nbest, lengths, penalties) or sampling

# The lowest sampling temperature: below it logits / T overflow float32 (3.4e38) for logits of
# ordinary size and the draws turn to NaN; at it, sampling is already greedy decoding for any
# two logits 1e-4 apart (their probabilities differ by a factor e^100).
MIN_TEMPERATURE = 1e-6
# the decoding.* keys that shape sampling: read with decoding.sample=true only
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "num_samples", "seed")


@dataclass
class DecodingConfig:
    """How to decode, as fairseq's GenerationConfig and Joey NMT's `testing:` section say it:
    a beam search (greedy decoding for beam 1 with nbest 1 and no constraint), or with `sample`
    outputs drawn at random. The decoding layer (attnseq/decoding/) takes this dataclass as it
    is; eval's and translate's options and the Python API's keywords are its fields by name."""

    beam: int = option(1, "beam size K: hypotheses kept per step; 1 = greedy decoding", ge=1)
    nbest: int = option(
        1,
        "hypotheses returned per input (<= beam), best first; validation and eval score the best",
        ge=1,
    )
    # lp = ((5 + |Y|) / 6) ** alpha: at most 10, lp of a 10,000-token output stays within
    # float32 (1667 ** 10 = 2e32); alpha = 1000 overflowed a 10-token one (2.5 ** 1000).
    # With length_penalty_offset=0 (|Y| ** alpha) alpha = 10 stays within it up to 7,000 tokens
    length_penalty: float = option(
        1.0,
        "GNMT alpha of lp = ((5 + |Y|) / 6)^alpha that beam search ranks by, score / lp (Wu et"
        " al. 2016, eq. 14; 0 = raw log-probability, larger favours longer outputs)",
        ge=0.0,
        le=10.0,
    )
    length_penalty_offset: float = option(
        5.0,
        "k of the length penalty lp = ((k + |Y|) / (k + 1))^alpha: 5 is GNMT's (Wu et al."
        " 2016); 0 gives |Y|^alpha, the score per token of Hugging Face and fairseq",
        ge=0.0,
        le=1000.0,
    )
    max_output_ratio: float = option(
        1.5, "decode at most ratio * source length + max_output_extra tokens", ge=0.0
    )
    max_output_extra: int = option(
        10, "tokens added to the output length limit (see max_output_ratio)", ge=0
    )
    stop_at_current_length: bool = option(
        False,
        "beam search stops a sentence as Hugging Face's generate does with early_stopping=false"
        " (docs/internals/decoding.md); false: once its n-best list cannot change (exact)",
    )
    eos_at_limit: bool = option(
        False,
        "an output that reaches the length limit ends with EOS at probability one (Hugging"
        " Face's forced_eos_token_id); false: it ends there without EOS",
    )
    forced_first_token: int | None = option(
        None,
        "the id every output starts with, at probability one, in every search (Hugging Face's"
        " forced_bos_token_id: BART's <s>); None = the model's choice. A multilingual"
        " model's is the id of data.tgt_lang_code",
        ge=0,
    )
    min_length: int = option(0, "no EOS before this many output tokens", ge=0)
    no_repeat_ngram: int = option(
        0, "forbid any n-gram of this size twice in an output (0 = off)", ge=0
    )
    coverage_penalty: float = option(
        0.0,
        "beta of the GNMT coverage penalty at beam search (Wu et al. 2016, eq. 14; 0 = off)",
        ge=0.0,
    )
    # --- sampling (attnseq/decoding/sampling.py)
    sample: bool = option(
        False,
        "draw every output token at random from the model's distribution (temperature, top_k,"
        " top_p) instead of searching; beam and nbest 1, min_length and no_repeat_ngram apply",
    )
    temperature: float = option(
        1.0, "sampling: softmax(logits / T); 1 = the model's distribution", ge=MIN_TEMPERATURE
    )
    top_k: int = option(0, "sampling among the k most probable tokens only (0 = all)", ge=0)
    top_p: float = option(
        1.0,
        "nucleus sampling: among the fewest most probable tokens whose probability reaches p"
        " (Holtzman et al. 2020; 1 = all)",
        gt=0.0,
        le=1.0,
    )
    num_samples: int = option(1, "samples drawn per input", ge=1)
    seed: int = option(
        0,
        "seed of the sampling draws: the same seed, input and device give the same samples",
        ge=0,
        le=2**64 - 1,  # the range of torch's generator seeds
    )


# tracker.*: the experiment trackers besides TensorBoard (see `logger` in TrainConfig)


@dataclass
class TrackerConfig:
    mlflow_tracking_uri: str | None = option(
        None,
        "MLflow tracking URI (e.g. sqlite:////home/me/mlflow.db, shared by every run); None ="
        " the run directory's own SQLite store RUN_DIR/mlflow.db",
    )
    project: str = option(
        "attnseq", "the MLflow experiment and the W&B project the run is logged under"
    )
    log_checkpoint: CheckpointUpload = option(
        CheckpointUpload.none,
        "none, best or last: the checkpoint MLflow and W&B keep as an artifact at the end, "
        "beside the resolved config, train.log and metrics.json",
    )


@dataclass
class TrainConfig:
    """The root of `attnseq train` (train.yaml)."""

    seed: int = option(
        1, "seed of every random choice (data, initialisation, dropout)", ge=0, le=2**32 - 1
    )
    data: DataConfig = option(help="what to train on", default_factory=DataConfig)
    model: ModelConfig = option(help="the model", default_factory=ModelConfig)
    optim: OptimConfig = option(help="optimizer and schedule", default_factory=OptimConfig)
    trainer: TrainerConfig = option(
        help="training loop, validation and checkpoints", default_factory=TrainerConfig
    )
    decoding: DecodingConfig = option(
        help="how validation, the test evaluation, eval and translate decode",
        default_factory=DecodingConfig,
    )
    name: str = option("default", "a label for the run, shown in logs and metrics.json")
    logger: list[Tracker] = option(
        help="where the run logs params, metrics and alignment figures: any of tensorboard,"
        " mlflow (pip install 'attnseq[mlflow]'), wandb (offline; pip install 'attnseq[wandb]')",
        default_factory=lambda: [Tracker.tensorboard],
    )
    tracker: TrackerConfig = option(
        help="settings of the mlflow and wandb trackers", default_factory=TrackerConfig
    )
    optimized_metric: str | None = option(
        None,
        "metrics.json key the task function returns to a sweeper (e.g. Optuna); None = the test "
        "value of trainer.early_stopping_metric",
    )
    resume: str | None = option(
        None,
        'Continue a run: "auto" = the run directory\'s checkpoints/last.pt (a fresh run when there'
        " is none), or the path of a checkpoint. seed, data.*, model.* and optim.* must match the"
        " checkpoint's (see `resume_conflicts`); trainer.* may change (e.g. a larger max_steps).",
    )
    # set by `config=PATH` (hydra_entry.py), not by the user: it shows in the run's config
    config_file: str | None = option(
        None, "the experiment file that config=PATH loaded (absolute path); None = none"
    )


def register_configs() -> None:
    """Register the schema so train.yaml can name it in its defaults list, and the resolver of
    `${required:KEY}` (`required_value`)."""
    from hydra.core.config_store import ConfigStore  # only the CLI path needs Hydra
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
    if not OmegaConf.has_resolver(REQUIRED_RESOLVER):
        OmegaConf.register_new_resolver(REQUIRED_RESOLVER, required_value)


# `${required:KEY}`: a value a config file leaves to the command line (the packaged fine-tuning
# recipe's model.init_from). OmegaConf's own `???` cannot say it: merged onto the schema's
# default, a missing value leaves that default in place.
REQUIRED_RESOLVER = "required"


def required_value(key: str) -> Any:
    """The resolver of `${required:KEY}`: resolving it means the command line did not replace
    it, a UserError naming the key and the first sentence of its help."""
    node: Any = TrainConfig()
    *parents, leaf = key.split(".")
    for name in parents:
        node = getattr(node, name, None)
    fields = {spec.name: spec for spec in dataclasses.fields(node)} if node is not None else {}
    help_text = fields[leaf].metadata.get("help", "") if leaf in fields else ""
    about = f" ({help_text.split('. ')[0]})" if help_text else ""
    raise UserError(
        f"{key} needs a value, which the config leaves to the command line: give {key}=VALUE"
        + about
    )
