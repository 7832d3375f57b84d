"""`model.*`: the model family, its sizes and its attention (`model.attention.*`, `model.rnn.*`)."""

from dataclasses import dataclass

from attnseq.config.choices import (
    AttentionKind,
    AttentionValues,
    DecoderInit,
    DecoderStyle,
    HardMode,
    Hierarchy,
    ModelFamily,
    Norm,
    Positions,
    RNNCell,
    Score,
    SparsePattern,
    Window,
)
from attnseq.config.fields import option


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
    """RNN attention (score, window, D, attn_dim) and the transformer's self-attention
    mechanism (kind and the keys after it); keys of the other family are ignored."""

    score: Score = option(Score.additive, "RNN attention score (none = no attention)")
    window: Window = option(  # type: ignore[valid-type]
        Window["global"], "RNN attention window: global, local_m or local_p (Luong)"
    )
    D: int = option(
        5,
        "Local half-width: Luong local attention's window = 2D+1 source positions (RNN); the "
        "sliding window of transformer self-attention, kind=local and longformer: |i-j| <= D",
        ge=1,
    )
    attn_dim: int | None = option(None, "additive/concat hidden size; None = model.hidden", ge=1)
    hierarchy: Hierarchy = option(
        Hierarchy.none,
        "RNN: sentence = segment attention x word attention (Nallapati et al. 2016); segments "
        "are speaker turns (#Person1#: ...) or sentences",
    )
    max_segments: int = option(
        64, "hierarchy: most segments per source; later text joins the last one", ge=1
    )
    hard: HardMode = option(
        HardMode.none,
        "hard attention (RNN attention, transformer cross-attention): gumbel or reinforce"
        " training, argmax at evaluation; none = soft",
    )
    hard_k: int = option(1, "hard attention: source positions chosen per step (top-k)", ge=1)
    values: AttentionValues = option(
        AttentionValues.annotations,
        "RNN: what the context reads: annotations (h_j) or embeddings (each source word and "
        "its position alone; the keys stay h_j), so a hard choice reads the word it points at",
    )
    # --- transformer self-attention (cross-attention is always full)
    kind: AttentionKind = option(AttentionKind.full, "transformer self-attention mechanism")
    decoder_self: bool = option(False, "also decoder self-attention (causal kinds, see below)")
    stride: int = option(8, "strided: the stride l of Child et al.'s patterns", ge=1)
    pattern: SparsePattern = option(SparsePattern.strided, "strided: which of the two patterns")
    summary: int = option(1, "strided, pattern=fixed: summary cells c per block (1..stride)", ge=1)
    global_tokens: int = option(
        1, "longformer: the first N source positions attend and are attended", ge=0
    )
    proj_dim: int = option(
        64, "linformer: k, rows the keys/values are projected to (n = max_positions)", ge=1
    )
    features: int = option(128, "performer: m, random features per head", ge=1)
    block_size: int = option(16, "bigbird: b, positions per block", ge=1)
    window_blocks: int = option(
        1, "bigbird: w, neighbour blocks on each side of a query's block (3-block window: 1)", ge=0
    )
    global_blocks: int = option(
        1, "bigbird: g, the first g blocks attend to and are attended by every position", ge=0
    )
    random_blocks: int = option(2, "bigbird: r, random key blocks per query block", ge=0)
    pattern_seed: int = option(
        0, "bigbird: seed of the random blocks (layer l uses seed + l): one fixed pattern", ge=0
    )
    # --- persistent memory (Sukhbaatar et al. 2019), any transformer attention
    memory_slots: int = option(
        0, "N learned key/value vectors per head appended to every self-attention (0 = off)", ge=0
    )
    memory_in_cross: bool = option(False, "memory_slots also in cross-attention")


@dataclass
class ModelConfig:
    """Both families share one schema; keys of the other family are ignored (the model/ group)."""

    family: ModelFamily = option(ModelFamily.rnn, "rnn or transformer")
    # --- RNN encoder-decoder
    decoder: DecoderStyle = option(DecoderStyle.bahdanau, "RNN decoder: bahdanau or luong")
    emb_dim: int = option(64, "RNN token embedding size", ge=1)
    hidden: int = option(128, "decoder hidden size", ge=1)
    enc_hidden: int | None = option(
        None, "per direction; None = hidden / directions (outputs = hidden)", ge=1
    )
    input_feeding: bool = option(True, "Luong: feed h~_{t-1} into the next step")
    rnn: RNNConfig = option(help="RNN cell, layers and direction", default_factory=RNNConfig)
    attention: AttentionConfig = option(help="attention mechanism", default_factory=AttentionConfig)
    # --- transformer
    d_model: int = option(256, "transformer model width", ge=1)
    heads: int = option(4, "attention heads; must divide d_model", ge=1)
    enc_layers: int = option(3, "transformer encoder layers", ge=1)
    dec_layers: int = option(3, "transformer decoder layers", ge=1)
    ff_dim: int = option(1024, "transformer feed-forward inner size", ge=1)
    norm: Norm = option(Norm.pre, "pre or post layer normalisation")
    positions: Positions = option(
        Positions.sinusoidal, "sinusoidal or learned positional encodings"
    )
    attention_dropout: float = option(
        0.0, "dropout on attention weights, in [0, 1)", ge=0.0, lt=1.0
    )
    max_positions: int = option(1024, "learned positions; linformer's sequence length n", ge=1)
    conv_kernel: int = option(
        0,
        "odd k: a depthwise-separable convolution sublayer (Conformer) after each encoder"
        " layer's self-attention (0 = off)",
        ge=0,
    )
    # --- both
    dropout: float = option(0.1, "dropout probability, in [0, 1)", ge=0.0, lt=1.0)
    tie_embeddings: bool = option(True, "output projection shares the target embedding")
    # --- pointer-generator and coverage (See et al. 2017; attnseq/models/pointer_generator.py)
    copy: bool = option(False, "mix a copy distribution over the source into the output (p_gen)")
    coverage: bool = option(
        False, "coverage vector: RNN: fed to the attention score; both: its loss"
    )
    copy_layer: int = option(
        -1, "transformer: decoder layer whose head-averaged cross-attention copies"
    )
    # --- guided alignment (Garg et al. 2019; optim.alignment_lambda)
    alignment_layer: int = option(
        -1,
        "transformer: decoder layer whose cross-attention guided alignment supervises (-1 ="
        " the last; Garg et al. 2019 supervise the penultimate, -2)",
    )
    alignment_head: int | None = option(
        None,
        "transformer: the supervised head of that layer, 0-based; None = the mean of its heads",
        ge=0,
    )
