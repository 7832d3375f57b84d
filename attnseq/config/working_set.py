"""The activations of one training step, from the config alone: the batch the token sampler
makes at its worst, and what the model of each family and attention kind holds for it.

`batch_shape` is the batch of the longest examples (data/token_sampler.py: B * max(S, T) <=
data.max_tokens). `activation_elements` counts the float elements one forward + backward pass
over it keeps alive at its peak: the tensors saved for the backward pass, layer by layer, plus
the matrices each attention kind materialises (read from attnseq/attention/ and the model
builders in attnseq/models/):

    kind (transformer)  per encoder self-attention layer and head, for S positions
    full                the fused SDPA kernel: O(S d_k), no S x S matrix; persistent memory
                        adds its N slots to the keys
    local               blocks of b = min(S, max(w, 32)) queries against b + 2w keys
    strided             a (B, S, S) bool mask of the pattern, the fused kernel
    longformer          the band of `local` plus g global columns, g global rows over S keys
    linformer           S x k scores against the projected keys and values
    linear, performer   S x d_k (linear) or S x m (performer) feature maps of queries and keys
    bigbird             nb = ceil(S / b) blocks of b queries against K b keys, K = 2w + 1 + g +
                        r blocks (at most nb), padded to whole blocks; the g b global rows
                        through the fused kernel, which is all there is when g b >= S
    decoder self        the kind's causal form where model.attention.decoder_self is set
                        (bigbird and strided: a T x T mask; linear and performer: prefix
                        sums of F x d_k per block of 64 positions), else the fused kernel
    cross-attention     the fused kernel; copy/coverage take the copy layer's T x S weights

    RNN (per decoder step t, teacher forced, every step kept for backward)
    additive, concat    tanh(W q + U h) over the source: S x attn_dim per sentence and step
    dot, general, ...   S scores and weights per sentence and step
    local_m, local_p    the content score's, plus the window's S-wide Gaussian and mask
    hierarchy           the word attention, the segment attention with its own score over
                        one segment per 16 source tokens (at most max_segments), and their
                        S-wide combination
    copy, coverage      the copy mass scattered into an extended vocabulary (B, T, V) in log
                        space, the coverage vector's S per step, and with an additive score
                        its projection w_c c: S x attn_dim per step

Each count is multiplied by the copies of it that are alive at once (the value, its saved
inputs, its gradient): constants measured on the CPU with scripts/benchmark_memory_estimate.py,
which compares the estimate with the measured peak of one training step (see resources.py).
"""

import math
from dataclasses import dataclass

from attnseq.config.choices import (
    AttentionKind,
    DataSource,
    DecoderStyle,
    Hierarchy,
    ModelFamily,
    RNNCell,
    Score,
)
from attnseq.config.schema import ModelConfig, TrainConfig

# generated tasks whose lengths the config does not state: about their longest example
DATE_SOURCE_LENGTH = 40  # characters of the longest dates ("Wednesday, September 27th, ...")
DATE_TARGET_LENGTH = 10  # YYYY-MM-DD
TOY_SOURCE_LENGTH, TOY_TARGET_LENGTH = 16, 20  # words of the toy translation's longest pairs
# tokens of a typical segment (a sentence, a speaker turn) of a hierarchical model's source
SEGMENT_LENGTH = 16
# sliding-window attention's smallest query block (attention/sliding_window.py MIN_BLOCK)
MIN_WINDOW_BLOCK = 32
# causal linear and performer attention's prefix-sum block (attention/linear.py CAUSAL_BLOCK)
CAUSAL_BLOCK = 64

# Copies alive at the peak of the backward pass, per element counted below (measured).
RESIDUAL_COPIES = 14  # per transformer layer and token: x d_model
FEED_FORWARD_COPIES = 3  # per transformer layer and token: x ff_dim
SCORE_COPIES = 4  # an attention matrix: scores, weights, dropout, gradient
LOGIT_COPIES = 4  # logits, log-softmax, their gradients
RNN_STATE_COPIES = 4  # per RNN layer, direction and token: x gates x hidden
RNN_STEP_COPIES = 6  # per decoder step: the step's hidden, context, pre-output, ...
ADDITIVE_COPIES = 2  # the additive/concat score's (B, S, A) tanh and its gradient


@dataclass(frozen=True)
class BatchShape:
    """The largest training batch: `sentences` examples of `source` positions, whose decoder
    reads `target` positions (BOS + target)."""

    sentences: int
    source: int
    target: int


def longest_lengths(cfg: TrainConfig) -> tuple[int, int]:
    """(source, decoder positions) of the longest training examples: what the generated task
    makes, else the length limits data.max_src_len and data.max_tgt_len (+ BOS)."""
    data = cfg.data
    source, target = data.max_src_len, data.max_tgt_len + 1
    if data.source is not DataSource.generated:
        return source, target
    if data.name == "dates":
        made = (DATE_SOURCE_LENGTH, DATE_TARGET_LENGTH + 1)
    elif data.name == "toy_translation":
        made = (TOY_SOURCE_LENGTH, TOY_TARGET_LENGTH + 1)
    else:  # reverse, copy, sort: the target has the source's length
        made = (data.max_len, data.max_len + 1)
    return min(made[0], source), min(made[1], target)


def batch_shape(cfg: TrainConfig) -> BatchShape:
    """The batch of the longest examples under the token budget (data/token_sampler.py)."""
    data = cfg.data
    source, target = longest_lengths(cfg)
    sentences = max(1, data.max_tokens // max(source, target))
    if data.max_sentences is not None:
        sentences = min(sentences, data.max_sentences)
    if data.source is DataSource.generated:
        sentences = min(sentences, data.train_size)
    return BatchShape(sentences, source, target)


def bigbird_blocks(model: ModelConfig, length: int) -> tuple[int, int, int]:
    """(nb, K, g): blocks of a `length`-position sequence, key blocks per query block, and
    global blocks (attention/bigbird.py `blocked`)."""
    attention = model.attention
    blocks = -(-length // attention.block_size)
    global_blocks = min(attention.global_blocks, blocks)
    window = 2 * attention.window_blocks + 1
    width = min(blocks, window + global_blocks + attention.random_blocks)
    return blocks, width, global_blocks


def encoder_attention_elements(model: ModelConfig, shape: BatchShape) -> int:
    """Float elements of one encoder layer's self-attention matrices, all heads (see the
    module docstring's table)."""
    attention, kind = model.attention, model.attention.kind
    batch, n, heads = shape.sentences, shape.source, model.heads
    d_k = max(model.d_model // heads, 1)
    rows = batch * heads
    if kind is AttentionKind.full:
        return rows * (n + attention.memory_slots) * d_k
    if kind in (AttentionKind.local, AttentionKind.longformer):
        w = max(0, min(attention.D, n - 1))
        block = min(n, max(w, MIN_WINDOW_BLOCK))
        padded = math.ceil(n / block) * block
        band = rows * padded * (block + 2 * w)
        if kind is AttentionKind.local:
            return band
        g = min(attention.global_tokens, n)
        return band + rows * padded * g + rows * g * n
    if kind is AttentionKind.strided:
        return batch * n * n // 4 + rows * n * d_k  # the bool mask (1 byte), the fused kernel
    if kind is AttentionKind.linformer:
        return rows * n * attention.proj_dim + 2 * rows * attention.proj_dim * d_k
    if kind is AttentionKind.linear:
        return 2 * rows * n * d_k
    if kind is AttentionKind.performer:
        return 2 * rows * n * attention.features
    # bigbird
    blocks, width, global_blocks = bigbird_blocks(model, n)
    b = attention.block_size
    if global_blocks * b >= n:  # every row is global: one fused attention
        return rows * n * d_k
    # the blocks (padded to whole blocks), and the global rows' fused attention over all keys
    return rows * blocks * b * width * b + rows * min(global_blocks * b, n) * d_k


def decoder_attention_elements(model: ModelConfig, shape: BatchShape) -> int:
    """Float elements of one decoder layer's self- and cross-attention matrices."""
    batch, t, heads = shape.sentences, shape.target, model.heads
    d_k = max(model.d_model // heads, 1)
    rows = batch * heads
    kind = model.attention.kind if model.attention.decoder_self else AttentionKind.full
    if kind in (AttentionKind.strided, AttentionKind.bigbird):
        own = batch * t * t // 4 + rows * t * d_k  # the causal pattern as a T x T mask
    elif kind is AttentionKind.full:
        own = rows * (t + model.attention.memory_slots) * d_k
    elif kind in (AttentionKind.linear, AttentionKind.performer):
        # blocked prefix sums: each block of C keeps its (F, d_k) sum and a C x C product
        features = d_k if kind is AttentionKind.linear else model.attention.features
        blocks = math.ceil(t / CAUSAL_BLOCK)
        own = rows * (blocks * features * d_k + t * CAUSAL_BLOCK + 2 * t * features)
    else:
        target = BatchShape(batch, t, t)
        own = encoder_attention_elements(model, target)
    cross = rows * t * d_k
    return own + cross


def transformer_activations(model: ModelConfig, shape: BatchShape, vocab: int) -> int:
    """Float elements of a transformer's training step (module docstring)."""
    source_tokens = shape.sentences * shape.source
    target_tokens = shape.sentences * shape.target
    per_token = RESIDUAL_COPIES * model.d_model + FEED_FORWARD_COPIES * model.ff_dim
    if model.conv_kernel:
        per_token += RESIDUAL_COPIES * model.d_model  # the convolution sublayer
    layers = source_tokens * model.enc_layers * per_token
    layers += target_tokens * model.dec_layers * (per_token + RESIDUAL_COPIES * model.d_model)
    attention = SCORE_COPIES * (
        model.enc_layers * encoder_attention_elements(model, shape)
        + model.dec_layers * decoder_attention_elements(model, shape)
    )
    copies = LOGIT_COPIES
    if model.copy or model.coverage:
        # the copy layer's explicit weights, and the mixture in log space
        attention += SCORE_COPIES * shape.sentences * model.heads * shape.target * shape.source
        copies += LOGIT_COPIES
    return layers + attention + target_tokens * vocab * copies


def rnn_score_elements(model: ModelConfig, keys: int) -> int:
    """Float elements of one RNN attention score over `keys` positions, per sentence and
    decoder step."""
    score = model.attention.score
    if score is Score.none:
        return 0
    attn_dim = model.attention.attn_dim or model.hidden
    elements = SCORE_COPIES * keys
    if score in (Score.additive, Score.concat):
        elements += ADDITIVE_COPIES * keys * attn_dim
    if model.attention.window.name != "global":
        elements += SCORE_COPIES * keys  # the window's Gaussian and mask
    return elements


def rnn_activations(model: ModelConfig, shape: BatchShape, vocab: int) -> int:
    """Float elements of an RNN encoder-decoder's training step (module docstring)."""
    gates = 4 if model.rnn.cell is RNNCell.lstm else 3
    directions = 2 if model.rnn.bidirectional else 1
    enc_hidden = model.enc_hidden or model.hidden // directions
    enc_out = enc_hidden * directions
    source_tokens = shape.sentences * shape.source
    target_tokens = shape.sentences * shape.target
    encoder = source_tokens * (
        model.emb_dim + RNN_STATE_COPIES * model.rnn.layers * directions * gates * enc_hidden
    )
    step = RNN_STATE_COPIES * model.rnn.layers * gates * model.hidden
    step += RNN_STEP_COPIES * (model.hidden + enc_out + model.emb_dim)
    per_step = rnn_score_elements(model, shape.source)
    if model.attention.hierarchy is not Hierarchy.none:
        segments = min(model.attention.max_segments, math.ceil(shape.source / SEGMENT_LENGTH))
        per_step += rnn_score_elements(model, segments) + SCORE_COPIES * shape.source
    copies = LOGIT_COPIES
    if model.copy or model.coverage:
        per_step += SCORE_COPIES * shape.source  # the copy mass, the coverage vector
        copies += LOGIT_COPIES
    if model.coverage and model.attention.score in (Score.additive, Score.concat):
        # w_c c_i joins the score's sum: another (B, S, A) per step (attention/additive.py)
        per_step += ADDITIVE_COPIES * shape.source * (model.attention.attn_dim or model.hidden)
    if model.decoder is DecoderStyle.luong:
        step += RNN_STEP_COPIES * model.hidden  # the attentional state h~
    decoder = target_tokens * (step + per_step)
    return encoder + decoder + target_tokens * vocab * copies


def activation_elements(model: ModelConfig, shape: BatchShape, vocab: int) -> int:
    """Float elements alive at the peak of one training step's forward + backward pass."""
    if model.family is ModelFamily.transformer:
        return transformer_activations(model, shape, vocab)
    return rnn_activations(model, shape, vocab)
