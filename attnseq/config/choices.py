"""The choices of the configuration: one Enum per key whose value is picked from a list; every
other list of choices (help, checks, completion) derives from these."""

from enum import Enum


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


class Hierarchy(Enum):
    """RNN hierarchical attention (attnseq/models/rnn_hierarchical.py)."""

    none = "none"  # flat attention over the source words
    sentence = "sentence"  # segments: speaker turns, or sentences (attnseq/data/segments.py)


class Score(Enum):
    additive = "additive"
    dot = "dot"
    general = "general"
    concat = "concat"
    location = "location"
    scaled_dot = "scaled_dot"
    none = "none"  # no attention: the fixed-vector encoder-decoder baseline


class AttentionValues(Enum):
    """What an RNN attention's context averages (or, hard, reads): models/rnn.py."""

    annotations = "annotations"  # the encoder annotations h_j, also the keys
    embeddings = "embeddings"  # W_v x_j of the source word embeddings; keys stay h_j


class HardMode(Enum):
    """Hard attention (attnseq/attention/hard.py): how the one chosen position is trained."""

    none = "none"  # soft attention: the softmax-weighted average of every position
    gumbel = "gumbel"  # straight-through Gumbel-softmax (Jang et al. 2017)
    reinforce = "reinforce"  # REINFORCE with a baseline (Xu et al. 2015, section 4.1)


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
    bigbird = "bigbird"  # window + global + random blocks, Zaheer et al. 2020 (bigbird.py)

    @property
    def causal(self) -> bool:
        """Whether the mechanism has a causal form, so that decoder self-attention can use it
        (model.attention.decoder_self=true): all but the encoder-only longformer and linformer,
        whose global tokens or projections mix every position, future ones included."""
        return self not in (AttentionKind.longformer, AttentionKind.linformer)


class SparsePattern(Enum):
    strided = "strided"  # |i-j| <= stride or (i-j) mod stride = 0
    fixed = "fixed"  # same block of `stride`, or one of the last `summary` cells of a block


class Norm(Enum):
    pre = "pre"
    post = "post"


class Positions(Enum):
    sinusoidal = "sinusoidal"  # sin at channel 2i, cos at 2i + 1 (Vaswani et al. 2017)
    learned = "learned"
    sinusoidal_split = "sinusoidal_split"  # sin in the first half, cos in the second (Marian)
    # fairseq's: sin and cos halves of frequencies exp(-i log(10000) / (half - 1)) (M2M100)
    sinusoidal_fairseq = "sinusoidal_fairseq"


class Activation(Enum):
    """The transformer feed-forward network's nonlinearity (models/transformer_layers.py)."""

    relu = "relu"  # max(0, x) (Vaswani et al. 2017)
    gelu = "gelu"  # x Phi(x), Phi the standard normal CDF (Hendrycks & Gimpel 2016)
    gelu_tanh = "gelu_tanh"  # GELU's tanh approximation
    silu = "silu"  # x sigmoid(x), "swish" (Ramachandran et al. 2017)


class OptimizerName(Enum):
    adam = "adam"
    adamw = "adamw"


class Scheduler(Enum):
    constant = "constant"  # lr fixed after the optional linear warm-up
    inverse_sqrt = "inverse_sqrt"  # Noam / Vaswani et al. 2017 eq. 3 shape, peak = optim.lr
    plateau = "plateau"  # multiply by plateau_factor when the validation metric stalls
    cosine = "cosine"  # cosine decay to 0 over the training budget (steps, epochs or minutes)
    linear = "linear"  # linear decay to 0 over the training budget


class CheckpointUpload(Enum):
    """tracker.log_checkpoint: which checkpoint a tracker keeps as an artifact at the end."""

    none = "none"  # none: checkpoints stay in RUN_DIR/checkpoints only (they can be large)
    best = "best"
    last = "last"


class Tracker(Enum):
    """Where a training run logs its params, metrics and figures (`logger=[...]`,
    attnseq/training/trackers.py)."""

    tensorboard = "tensorboard"  # RUN_DIR/tb: event files for `tensorboard --logdir`
    mlflow = "mlflow"  # an MLflow run in a local file store (attnseq[mlflow])
    wandb = "wandb"  # a Weights & Biases run in offline mode under RUN_DIR/wandb (attnseq[wandb])


class HeatmapScale(Enum):
    """trainer.heatmap_scale: the colour scale of the heatmaps a validation draws."""

    shared = "shared"  # one scale for all of a validation's figures: their colours compare
    per_figure = "per_figure"  # each figure from 0 to its own largest weight


class Precision(Enum):
    """trainer.precision (attnseq/training/precision.py). `trainer.precision=32` selects fp32 by
    its value; bf16 and fp16 by name."""

    fp32 = 32  # float32 everywhere
    bf16 = "bf16"  # autocast to bfloat16
    fp16 = "fp16"  # autocast to float16 with dynamic loss scaling


# metric name endings where smaller is better: loss, perplexity, alignment error rate
LOWER_IS_BETTER = ("loss", "ppl", "aer")


def higher_is_better(metric: str) -> bool:
    """The direction of a metric by its name (`loss`, `test/bleu`, `valid/aer`): loss,
    perplexity and alignment error rate are minimised; every other metric is maximised."""
    return not metric.lower().endswith(LOWER_IS_BETTER)


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
        return higher_is_better(self.value)

    @property
    def best_possible(self) -> float:
        """The value no model can improve on: exact match is a fraction, BLEU, chrF and
        ROUGE are percentages, loss is non-negative and perplexity is at least 1."""
        ceilings = {Metric.exact_match: 1.0, Metric.loss: 0.0, Metric.ppl: 1.0}
        return ceilings.get(self, 100.0)
