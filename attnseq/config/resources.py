"""Whether a configuration can fit the machine: the memory a training step, validation decoding
and generated data take, estimated from the config alone (docs/internals/configuration.md)."""

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnseq.config.choices import (
    AttentionKind,
    DataSource,
    DecoderStyle,
    Hierarchy,
    ModelFamily,
    RNNCell,
    Score,
    TokenizerKind,
)
from attnseq.config.devices import resolve_device
from attnseq.config.schema import ModelConfig, TrainConfig
from attnseq.config.threads import usable_cores
from attnseq.errors import UserError

if TYPE_CHECKING:
    import torch

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
# Copies of a search step's (rows, V) scores alive at once: the logits, their log-softmax, the
# allowed ones (EOS, repeats masked) and the beam's candidate sums before the top-k; below the
# fewest measured (benchmarks/benchmark_memory_estimate.py --search), so a lower bound.
SEARCH_VOCAB_COPIES = 3


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
    """The batch of the longest examples under the token budget (data/batching.py)."""
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
    """Float elements of one encoder layer's self-attention matrices, all heads (the table of
    `activation_elements`)."""
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
    """Float elements of a transformer's training step (`activation_elements`)."""
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
    """Float elements of an RNN encoder-decoder's training step (`activation_elements`)."""
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
    """Float elements alive at the peak of one training step's forward + backward pass over
    the batch `shape`: the tensors saved for the backward pass, layer by layer, plus the
    matrices each attention kind materialises (as attnseq/attention/ and the model builders
    in attnseq/models/ build them), each count times the copies of it alive at once:

        kind (transformer)  per encoder self-attention layer and head, for S positions
        full                the fused SDPA kernel: O(S d_k), no S x S matrix; persistent memory
                            adds its N slots to the keys
        local               blocks of b = min(S, max(w, 32)) queries against b + 2w keys
        strided             a (B, S, S) bool mask of the pattern, the fused kernel
        longformer          the band of `local` plus g global columns, g global rows over S keys
        linformer           S x k scores against the projected keys and values
        linear, performer   S x d_k (linear) or S x m (performer) feature maps
        bigbird             nb = ceil(S / b) blocks of b queries against K b keys, K = 2w + 1 +
                            g + r blocks (at most nb), padded to whole blocks; the g b global
                            rows through the fused kernel, which is all there is when g b >= S
        decoder self        the kind's causal form where model.attention.decoder_self is set
                            (bigbird and strided: a T x T mask; linear and performer: prefix
                            sums of F x d_k per block of 64 positions), else the fused kernel
        cross-attention     the fused kernel; copy/coverage take the copy layer's T x S weights

        RNN (per decoder step, teacher forced, every step kept for backward)
        additive, concat    tanh(W q + U h) over the source: S x attn_dim per sentence and step
        dot, general, ...   S scores and weights per sentence and step
        local_m, local_p    the content score's, plus the window's S-wide Gaussian and mask
        hierarchy           the word attention, the segment attention with its own score over
                            one segment per 16 source tokens (at most max_segments), and their
                            S-wide combination
        copy, coverage      the copy mass scattered into an extended vocabulary (B, T, V) in
                            log space, the coverage vector's S per step, and with an additive
                            score its projection w_c c: S x attn_dim per step
    """
    if model.family is ModelFamily.transformer:
        return transformer_activations(model, shape, vocab)
    return rnn_activations(model, shape, vocab)


BYTES_PER_FLOAT = 4
# measured peak / estimate stays within [1 / FACTOR, FACTOR] (tests/config/test_resources.py)
FACTOR = 2.0
# weights, gradients and Adam's first and second moments
TRAINING_COPIES = 4
# generated symbol tasks: the smallest vocabulary a tokenizer adds (pad, unk, bos, eos)
SPECIAL_TOKENS = 4
# a generated example held in memory: two strings and two token-id lists, roughly this much
# per symbol plus a fixed overhead of Python objects
EXAMPLE_BYTES = 200
SYMBOL_BYTES = 40
# a date string has about this many characters
DATE_LENGTH = 20


@dataclass(frozen=True)
class Estimate:
    """Bytes a training run needs, by what needs them."""

    parameters: int  # number of parameters
    training_bytes: int  # weights, gradients, optimizer state
    activation_bytes: int  # one training batch's activations (and logits)
    decoding_bytes: int  # one validation batch under beam search
    data_bytes: int  # generated examples held in memory

    @property
    def device_bytes(self) -> int:
        """Training and validation alternate: the larger of the two beside the weights."""
        return self.training_bytes + max(self.activation_bytes, self.decoding_bytes)


def vocabulary_lower_bound(cfg: TrainConfig) -> int:
    """The smallest vocabulary the config can produce (0 where only the data can tell)."""
    data = cfg.data
    if data.tokenizer is TokenizerKind.sentencepiece:
        return data.spm_vocab_size
    if data.source is DataSource.generated and data.name in ("reverse", "copy", "sort"):
        return data.vocab_size + SPECIAL_TOKENS
    return 0


def rnn_parameters(model: ModelConfig, vocab: int) -> int:
    """Parameters of the RNN encoder-decoder (models/rnn.py), embeddings of size `vocab`."""
    gates = 4 if model.rnn.cell is RNNCell.lstm else 3
    directions = 2 if model.rnn.bidirectional else 1
    enc_hidden = model.enc_hidden or model.hidden // directions
    enc_out = enc_hidden * directions
    hidden, emb, layers = model.hidden, model.emb_dim, model.rnn.layers

    def rnn(inputs: int, size: int, dirs: int) -> int:
        first = dirs * gates * (size * (inputs + size) + 2 * size)
        rest = dirs * gates * (size * (size * dirs + size) + 2 * size)
        return first + (layers - 1) * rest

    total = rnn(emb, enc_hidden, directions) + 2 * vocab * emb
    bahdanau = model.decoder is DecoderStyle.bahdanau
    feed = hidden if model.input_feeding and not bahdanau else 0
    total += rnn(emb + (enc_out if bahdanau else feed), hidden, 1)
    total += enc_out * layers * hidden  # bridge
    out_dim = emb if model.tie_embeddings else hidden
    total += (hidden + enc_out + emb) * out_dim if bahdanau else (enc_out + hidden) * hidden
    total += 0 if model.tie_embeddings else out_dim * vocab
    attn_dim = model.attention.attn_dim or hidden
    score = model.attention.score
    if score in (Score.additive, Score.concat):
        total += (hidden + enc_out + 1) * attn_dim
    elif score is Score.general:
        total += hidden * enc_out
    elif score is Score.location:
        total += hidden * model.max_positions
    return total


def may_share_embeddings(model: ModelConfig) -> bool:
    """Whether source and target may read one embedding matrix: set, or left to the
    tokenizers (None: shared when one tokenizer serves both sides and the output is tied)."""
    share = model.share_src_tgt_embeddings
    return bool(share) or (share is None and model.tie_embeddings)


def transformer_parameters(model: ModelConfig, vocab: int, source_vocab: int | None = None) -> int:
    """Parameters of the transformer (models/transformer.py), a target vocabulary of `vocab`
    and a source one of `source_vocab` (None: the same): one embedding matrix where the two
    sides may share it (`may_share_embeddings`), the output projection's own where it is not
    tied, its bias (`output_bias`), a learned table of max_positions + position_offset rows
    per side, the embeddings' norms (`embed_norm`) and a pre-norm stack's final norms."""
    d, ff = model.d_model, model.ff_dim
    source_vocab = vocab if source_vocab is None else source_vocab
    attention = 4 * d * d + 4 * d
    feed_forward = 2 * d * ff + ff + d
    encoder = model.enc_layers * (attention + feed_forward + 4 * d)
    decoder = model.dec_layers * (2 * attention + feed_forward + 6 * d)
    shared = may_share_embeddings(model) and source_vocab == vocab
    embeddings = (vocab if shared else source_vocab + vocab) * d
    embeddings += (0 if model.tie_embeddings else vocab * d) + (vocab if model.output_bias else 0)
    rows = model.max_positions + model.position_offset
    positions = 2 * rows * d if model.positions.name == "learned" else 0
    norms = 2 * 2 * d * (int(model.embed_norm) + int(model.norm.name == "pre"))
    kind = model.attention.kind.name
    if kind == "linformer":
        encoder += model.enc_layers * 2 * model.max_positions * model.attention.proj_dim
    elif kind == "performer":
        encoder += model.enc_layers * model.attention.features * (d // model.heads)
    # persistent memory: N keys and values of d_k per head in every attention it is in
    memories = model.enc_layers + model.dec_layers * (2 if model.attention.memory_in_cross else 1)
    memory = memories * 2 * model.attention.memory_slots * d
    # the convolution sublayer: pointwise d -> 2d and d -> d, depthwise k d, norms
    k = model.conv_kernel
    conv = model.enc_layers * (3 * d * d + (k + 8) * d) if k else 0
    return encoder + decoder + embeddings + positions + norms + memory + conv


def source_length(cfg: TrainConfig) -> int:
    """Tokens of a typical source: known for generated tasks, else 1 (a lower bound)."""
    data = cfg.data
    if data.source is not DataSource.generated:
        return 1
    return DATE_LENGTH if data.name == "dates" else (data.min_len + data.max_len) // 2 + 1


def decoding_bytes(cfg: TrainConfig, vocab: int) -> int:
    """One validation batch under beam search: every hypothesis holds its sentence's encoder
    states (per decoder layer for a transformer's cross-attention), its token history up to the
    output limit, and a step's `SEARCH_VOCAB_COPIES` scores over the vocabulary (sampling:
    every sample is such a hypothesis)."""
    model, data, decoding = cfg.model, cfg.data, cfg.decoding
    width = source_state_width(model)
    length = source_length(cfg)
    tokens = data.eval_max_tokens
    if data.source is DataSource.generated:
        tokens = min(tokens, data.valid_size * length)
    sentences = max(1, tokens // length)
    steps = math.floor(length * decoding.max_output_ratio) + decoding.max_output_extra
    per_hypothesis = (length * width + SEARCH_VOCAB_COPIES * vocab) * BYTES_PER_FLOAT + steps * 8
    hypotheses = decoding.num_samples if decoding.sample else decoding.beam
    return sentences * hypotheses * per_hypothesis


def source_state_width(model: ModelConfig) -> int:
    """Floats a decoder reads per source position and hypothesis: a transformer's
    cross-attention keys and values in every decoder layer, an RNN's encoder annotations."""
    if model.family is ModelFamily.transformer:
        return 2 * model.d_model * model.dec_layers
    directions = 2 if model.rnn.bidirectional else 1
    return (model.enc_hidden or model.hidden // directions) * directions


def estimate(cfg: TrainConfig, vocab: tuple[int, int] | None = None) -> Estimate:
    """The memory a training run of `cfg` needs: the measured peak stays within a factor
    `FACTOR` of its training bytes (docs/internals/configuration.md). `vocab` is (source,
    target) where the tokenizers are known before the run (a pretrained model's,
    `model.init_from`), else the config's lower bound serves both sides."""
    model, data = cfg.model, cfg.data
    source, target = vocab or (vocabulary_lower_bound(cfg),) * 2
    if model.family is ModelFamily.transformer:
        parameters = transformer_parameters(model, target, source)
    else:  # one size for every table: the smaller (a lower bound)
        parameters = rnn_parameters(model, min(source, target))
    activations = activation_elements(model, batch_shape(cfg), target) * BYTES_PER_FLOAT
    data_bytes = 0
    if data.source is DataSource.generated:
        examples = data.train_size + data.valid_size + data.test_size
        length = (data.min_len + data.max_len) // 2 if data.name != "dates" else DATE_LENGTH
        data_bytes = examples * (EXAMPLE_BYTES + SYMBOL_BYTES * length) + data.vocab_size * 60
    return Estimate(
        parameters=parameters,
        training_bytes=parameters * BYTES_PER_FLOAT * TRAINING_COPIES,
        activation_bytes=activations,
        decoding_bytes=decoding_bytes(cfg, target),
        data_bytes=data_bytes,
    )


def total_ram() -> int:
    """Physical memory of this machine in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_ram() -> int:
    """Memory a new run can take without pushing other processes out: Linux's MemAvailable
    (free memory plus caches it can drop), else the physical memory."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return total_ram()


def cuda_memory(cfg: TrainConfig) -> int | None:
    """Free memory of the CUDA device the run will train on, or None when it trains on the CPU
    (or another device). Free, not total: what other processes hold on the GPU is not there for
    the run."""
    device = resolve_device(cfg.trainer.device, "trainer.device")
    if device.type != "cuda":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return free


def _size(n: float) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    power = min(int(math.log(max(n, 1), 1024)), len(units) - 1)
    scaled = n / 1024**power
    return f"{scaled:.1f} {units[power]}" if scaled < 10_000 else f"{scaled:.3g} {units[power]}"


def attention_text(model: ModelConfig) -> str:
    """The transformer's self-attention kind and the keys that size its matrices."""
    attention, kind = model.attention, model.attention.kind.name
    keys = {
        "local": f"D={attention.D}",
        "longformer": f"D={attention.D}, global_tokens={attention.global_tokens}",
        "strided": f"stride={attention.stride}",
        "linformer": f"proj_dim={attention.proj_dim}",
        "performer": f"features={attention.features}",
        "bigbird": f"block_size={attention.block_size}, global_blocks="
        f"{attention.global_blocks}, random_blocks={attention.random_blocks}",
    }.get(kind, f"memory_slots={attention.memory_slots}" if attention.memory_slots else "")
    return f"model.attention.kind={kind}" + (f" ({keys})" if keys else "")


def resource_problems(
    cfg: TrainConfig,
    ram: int,
    gpu: int | None,
    cores: int,
    vocab: tuple[int, int] | None = None,
) -> list[str]:
    """What of `cfg` cannot fit a machine with `ram` bytes, a GPU of `gpu` bytes (None: train
    on the CPU) and `cores` CPU cores; `vocab` as `estimate` takes it."""
    problems: list[str] = []
    need = estimate(cfg, vocab)
    model, batch = cfg.model, batch_shape(cfg)
    shape = (
        f"d_model={model.d_model}, ff_dim={model.ff_dim}, "
        f"layers={model.enc_layers}+{model.dec_layers}, {attention_text(model)}"
        if model.family is ModelFamily.transformer
        else f"hidden={model.hidden}, emb_dim={model.emb_dim}, rnn.layers={model.rnn.layers}"
    )
    memory, where = (gpu, "free GPU memory") if gpu is not None else (ram, "available RAM")
    data_fits = need.data_bytes <= ram
    if gpu is None and data_fits:
        memory -= need.data_bytes  # the generated data shares the RAM with the model
    decoding = need.decoding_bytes > need.activation_bytes
    if data_fits and need.device_bytes > memory and decoding:
        decoding = cfg.decoding
        problems.append(
            f"validation decoding does not fit: decoding.beam={decoding.beam} hypotheses per "
            f"sentence, each up to decoding.max_output_ratio={decoding.max_output_ratio} x "
            f"source + decoding.max_output_extra={decoding.max_output_extra} tokens, need at least "
            f"{_size(need.decoding_bytes)} beside the model's {_size(need.training_bytes)}: "
            f"more than the {_size(memory)} of {where} here; lower the beam, the output limit "
            "or data.eval_max_tokens"
        )
    elif data_fits and need.device_bytes > memory:
        problems.append(
            f"the model does not fit: {model.family.name} ({shape}) has at least "
            f"{need.parameters:,} parameters, {_size(need.training_bytes)} with gradients and "
            f"Adam state, plus about {_size(need.activation_bytes)} of activations for its "
            f"largest batch ({batch.sentences:,} sentences of {batch.source} source and "
            f"{batch.target} target positions under data.max_tokens={cfg.data.max_tokens}): "
            f"more than the {_size(memory)} of {where} here; make the model, the attention's "
            "blocks or windows, the lengths or "
            "data.max_tokens smaller"
        )
    if not data_fits:
        problems.append(_generated_data_problem(cfg, need.data_bytes, ram))
    threads = cfg.trainer.threads
    if isinstance(threads, int) and threads > cores:  # auto takes at most the cores
        problems.append(
            f"trainer.threads={threads} is more than the {cores} CPU cores here: extra intra-op "
            "threads only compete for them (null = torch's default)"
        )
    workers = cfg.trainer.num_workers
    if workers > cores:
        problems.append(
            f"trainer.num_workers={workers} is more than the {cores} CPU cores here: more "
            "DataLoader processes only compete for them"
        )
    return problems


def _generated_data_problem(cfg: TrainConfig, need: int, ram: int) -> str:
    data = cfg.data
    return (
        f"the generated data does not fit: data.train_size={data.train_size}, "
        f"valid_size={data.valid_size}, test_size={data.test_size} with lengths up to "
        f"data.max_len={data.max_len} take at least {_size(need)}, more than the {_size(ram)} "
        "of available RAM here"
    )


def check_generated_data(cfg: TrainConfig) -> None:
    """UserError when the splits of `cfg`'s generated task do not fit the RAM available now.
    For eval and heads, which read one split: every split of a generated task is made (each
    depends on the others), so data.train_size=2147483648 would generate for hours first."""
    need = estimate(cfg).data_bytes
    ram = available_ram()
    if need > ram:
        raise UserError(_generated_data_problem(cfg, need, ram))


def check_resources(cfg: TrainConfig, vocab: tuple[int, int] | None = None) -> None:
    """Raise UserError when `cfg` cannot fit this machine (see `resource_problems`): the RAM
    available now, since what other processes hold is not there for the run (the kernel would
    end it without a word), or the GPU's memory. `vocab`: (source, target) sizes of the
    tokenizers the run starts with, where known (a pretrained model's)."""
    problems = resource_problems(cfg, available_ram(), cuda_memory(cfg), usable_cores(), vocab)
    if len(problems) == 1:
        raise UserError(problems[0])
    if problems:
        raise UserError(
            "the configuration does not fit this machine:\n  - " + "\n  - ".join(problems)
        )


# Inference from a trained model (the Python API's requests): a lower bound of what one batch
# holds, checked before the work so that an absurd size (beam=10**9) is one UserError instead of
# an allocation the kernel answers by killing the process.

TEXT_BYTES_PER_CHARACTER = 16  # a character of text being tokenized: the str, its id's pointer


def inference_bytes(
    model: ModelConfig,
    vocab: int,
    rows: int,
    source: int,
    target: int,
    *,
    scored: int = 1,
    cross_maps: bool = False,
    self_maps: bool = False,
) -> int:
    """At least the bytes one batch of `rows` sequences (sentences x hypotheses or samples)
    holds, each of `source` source and `target` output positions, at once:

        per row  source x `source_state_width`         what the decoder reads of the source
                 + target x 2 d_model x dec_layers     a transformer decoder's own keys, values
                 + scored x 2 x vocab                  logits and log-probabilities (teacher
                                                       forced), or a search step's
                                                       `SEARCH_VOCAB_COPIES` x vocab
                 + target x maps x source              kept cross-attention (`cross_maps`)
                 + layers x heads x (source^2, target^2)  kept self-attention (`self_maps`)
                 + source x attn_dim                   an additive RNN score's tanh (a step's)
        floats of 4 bytes, plus target x 8 bytes of token history

    `scored` is 1 for a search or sampling (one step's scores at a time) and the target length
    for teacher forcing (every position's scores at once); maps is decoder layers x heads for
    a transformer, 1 for an RNN."""
    transformer = model.family is ModelFamily.transformer
    cache = 2 * model.d_model * model.dec_layers if transformer else 0
    scores = SEARCH_VOCAB_COPIES * vocab if scored == 1 else scored * 2 * vocab
    floats = source * source_state_width(model) + target * cache + scores
    if cross_maps:
        floats += target * (model.dec_layers * model.heads if transformer else 1) * source
    if self_maps and transformer:
        floats += model.heads * (model.enc_layers * source**2 + model.dec_layers * target**2)
    if not transformer and model.attention.score in (Score.additive, Score.concat):
        floats += source * (model.attention.attn_dim or model.hidden)
    return rows * (floats * BYTES_PER_FLOAT + target * 8)


def inference_memory(device: "torch.device") -> tuple[int, str]:
    """(bytes free, what they are) where inference on `device` runs: a CUDA device's free
    memory, else the available RAM."""
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free memory on {device}"
    return available_ram(), "available RAM"


def check_inference_memory(need: int, device: "torch.device", request: str, lower: str) -> None:
    """UserError when `need` bytes exceed the memory inference on `device` has
    (`inference_memory`): `request` says what asks for them, `lower` what to make smaller."""
    free, where = inference_memory(device)
    if need > free:
        raise UserError(
            f"{request} needs at least {_size(need)}, more than the {_size(free)} of {where} "
            f"here; lower {lower}"
        )
