"""What each output step of a trained model owes to each source piece and to the target prefix
it has read, by attention, Shift-Att, attention rollout, gradient × input, integrated gradients
or SmoothGrad, in one shape for every model family (`attribute`), each formula beside its code.

Shapes: B pairs, S source pieces, T target pieces (T + 1 steps: the </s> row), L layers, H heads,
E the embedding size, R rows (pair, step).
"""

import difflib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from attnseq.alignment.word_links import check_layer_and_head
from attnseq.data.batching import Batch, Example, collate
from attnseq.data.extended_vocab import ExtendedExample, extend_examples
from attnseq.errors import UserError
from attnseq.io.progress import counting
from attnseq.models.positional import make_positions, position_limit
from attnseq.models.seq2seq import Seq2Seq
from attnseq.models.transformer import TransformerSeq2Seq

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel

ATTRIBUTION_METHODS: tuple[str, ...] = (
    "attention",
    "shift-att",
    "rollout",
    "gradient-x-input",
    "integrated-gradients",
    "smoothgrad",
)
METHOD_ALIASES = {"saliency": "smoothgrad"}
ATTENTION_METHODS = ("attention", "shift-att", "rollout")  # read attention: layer/head apply
GRADIENT_METHODS = ("gradient-x-input", "integrated-gradients", "smoothgrad")
# rows (pair, step) of one pass of a gradient method, integration points included: each row
# keeps a whole teacher-forced pass's activations for the backward pass, so this bounds memory
_ROWS_PER_PASS = 512
# decoder steps whose rows share one pass on the prefix the last of them reads (a
# transformer's): fewer steps a group read less padding, more groups cost more passes
_STEPS_PER_GROUP = 16


@dataclass(frozen=True)
class PairAttribution:
    """One pair's attribution by one method: row t explains step t's score, the teacher-forced
    f_t = log p(y_t | y_<t, x) (a pointer-generator's final mixed distribution, See et al.
    2017, eq. 9, so copying is explained too).

    source_pieces: the S source pieces (the model's tokenizer).
    target_pieces: the T target pieces.
    source: (T + 1, S) float, row t = the step predicting target piece t (row T: </s>);
        non-negative, each row sums to 1.
    target_prefix: (T + 1, T + 1), row t over the decoder inputs <s>, y_0 .. y_{T-1}, lower
        triangular, rows sum to 1; None where the method does not attribute to the prefix
        (attention, shift-att).
    method: the method's name in `ATTRIBUTION_METHODS`.
    source_share: (T + 1,) gradient methods: the source's share of the step's attribution mass
        (source and prefix together), None otherwise.
    """

    source_pieces: list[str]
    target_pieces: list[str]
    source: Tensor
    target_prefix: Tensor | None
    method: str
    source_share: Tensor | None = None


@dataclass(frozen=True)
class RawAttribution:
    """A gradient method's scores of one pair, before absolute values and normalising: signed
    for gradient × input and integrated gradients, SmoothGrad's averaged magnitudes for it.

    source: (T + 1, S) a_t(s) summed over the embedding dimension.
    target_prefix: (T + 1, T + 1) the same over the decoder inputs.
    scores: (T + 1,) f_t at the input, log p(y_t | y_<t, x).
    baseline_scores: (T + 1,) f_t at the zero baseline (integrated gradients), else None.
    """

    source: Tensor
    target_prefix: Tensor
    scores: Tensor
    baseline_scores: Tensor | None = None


@dataclass(frozen=True)
class GradientSettings:
    """The knobs of the gradient methods (`attribute` documents them)."""

    ig_steps: int = 32
    smoothgrad_samples: int = 16
    smoothgrad_noise: float = 0.1
    seed: int = 0


# --------------------------------------------------------------------------- checks
def canonical_method(name: str, option: str = "method") -> str:
    """The method `name` means (an alias resolved); UserError naming `option` for an unknown
    one, with the closest valid name."""
    name = METHOD_ALIASES.get(name, name)
    if name in ATTRIBUTION_METHODS:
        return name
    valid = (*ATTRIBUTION_METHODS, *METHOD_ALIASES)
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f". Did you mean {close[0]!r}?" if close else ""
    raise UserError(f"{option} must be one of {', '.join(valid)}, got {name!r}{hint}")


def check_method_fits(
    trained: "TrainedModel",
    method: str,
    layer: int | None = None,
    head: int | None = None,
    names: tuple[str, str, str] = ("method", "layer", "head"),
) -> None:
    """UserError unless the checkpoint's model can be explained by `method` (canonical):
    rollout needs a transformer, attention methods a model with attention, gradient methods a
    model whose embeddings they can follow; `layer`/`head` (1-based) only for the attention
    methods and within the model's. `names`: what the method, layer and head are called in
    the messages (the API's arguments or the command's options)."""
    model_cfg = trained.cfg.model
    transformer = model_cfg.family.value == "transformer"
    what, layer_name, head_name = names
    if method in GRADIENT_METHODS:
        given = [n for n, v in ((layer_name, layer), (head_name, head)) if v is not None]
        if given:
            raise UserError(
                f"{' and '.join(given)} choose an attention map; {what} {method} reads none"
            )
        check_captum()
        if model_cfg.attention.hierarchy.value != "none":
            raise UserError(
                f"{what} {method} cannot follow the source positions of a hierarchical model "
                "(its encoder re-packs the source into segments); use attention"
            )
        return
    if method == "rollout" and not transformer:
        raise UserError(
            f"{what} rollout needs a transformer's self-attention; this checkpoint is an RNN "
            "(use attention or a gradient method)"
        )
    if not transformer:
        if model_cfg.attention.score.value == "none":
            raise UserError("this model has no attention (model.attention.score=none)")
        single = "an RNN's attention is one map"
        check_layer_and_head(layer, head, 1, 1, single, (layer_name, head_name))
        return
    heads = model_cfg.heads
    check_layer_and_head(layer, head, model_cfg.dec_layers, heads, "", (layer_name, head_name))


def check_captum() -> None:
    """UserError unless captum, which the gradient methods run on, is installed."""
    try:
        import captum.attr  # noqa: F401
    except ImportError:
        raise UserError(
            "the gradient attribution methods need captum: pip install 'attnseq[explain]'"
        ) from None


# --------------------------------------------------------------------------- the API
def attribute(
    trained: "TrainedModel",
    pairs: Sequence[tuple[str, str]],
    method: str,
    *,
    layer: int | None = None,
    head: int | None = None,
    batch_size: int = 16,
    ig_steps: int = 32,
    smoothgrad_samples: int = 16,
    smoothgrad_noise: float = 0.1,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> list[PairAttribution]:
    """Each pair's attribution by `method`, in the order of `pairs`.

    Args:
        trained: a checkpoint loaded with `attnseq.models.loading.load_trained_model`.
        pairs: (source line, target line), the target teacher-forced.
        method: one of `ATTRIBUTION_METHODS` (or "saliency", SmoothGrad).
        layer, head: the attention map of attention, shift-att and rollout (1-based; None:
            the last decoder layer, the mean of its heads); nothing for the others.
        batch_size: pairs per pass.
        ig_steps: integration points of integrated gradients.
        smoothgrad_samples, smoothgrad_noise: SmoothGrad's noisy copies and their standard
            deviation as a share of the embedding matrix's standard deviation.
        seed: SmoothGrad's noise.
        device: where the model runs (None: where it is).

        trained = load_trained_model(Path("best.pt"))
        (result,) = attribute(trained, [("a b c", "c b a")], "integrated-gradients")
        result.source.argmax(dim=1)  # the source piece each step owes most to

    Raises:
        UserError: an unknown method, one the model cannot be explained by (rollout on an RNN),
            layer/head outside the model's or given to a gradient method, an empty source or
            target, one longer than the model's positions, bad settings, captum missing.
    """
    method = canonical_method(method)
    check_method_fits(trained, method, layer, head)
    settings = GradientSettings(ig_steps, smoothgrad_samples, smoothgrad_noise, seed)
    _check_settings(batch_size, settings)
    encoded = encode_pairs(trained, pairs)
    extended = copy_view(trained, pairs, [e for e, _ in encoded])
    if device is not None:
        trained.model.to(device)
    maps = attribute_examples(
        trained.model,
        [e for e, _ in encoded],
        method,
        layer=layer,
        head=head,
        batch_size=batch_size,
        settings=settings,
        device=device,
        extended=extended,
    )
    return [
        PairAttribution(src_pieces, tgt_pieces, source, prefix, method, share)
        for ((_, (src_pieces, tgt_pieces)), (source, prefix, share)) in zip(
            encoded, maps, strict=True
        )
    ]


def _check_settings(batch_size: int, settings: GradientSettings) -> None:
    """UserError for a setting that cannot work."""
    for name, value in (
        ("batch_size", batch_size),
        ("ig_steps", settings.ig_steps),
        ("smoothgrad_samples", settings.smoothgrad_samples),
    ):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    if not settings.smoothgrad_noise >= 0:
        raise UserError(f"smoothgrad_noise must be >= 0, got {settings.smoothgrad_noise}")


def encode_pairs(
    trained: "TrainedModel", pairs: Sequence[tuple[str, str]]
) -> list[tuple[Example, tuple[list[str], list[str]]]]:
    """(source ids, target ids) and (source pieces, target pieces) of every pair, whole;
    UserError for no pairs, an empty side or one longer than the model's positions."""
    if not pairs:
        raise UserError("no sentence pairs to attribute")
    limit = position_limit(trained.model)
    encoded = []
    for number, (src_text, tgt_text) in enumerate(pairs, 1):
        sides = []
        for side, text, tokenizer in (
            ("source", src_text, trained.tokenizers.src),
            ("target", tgt_text, trained.tokenizers.tgt),
        ):
            ids = tokenizer.encode(text) if text.strip() else []
            if not ids:
                raise UserError(f"the {side} of pair {number} is empty: it needs a sentence")
            if limit is not None and len(ids) + 1 > limit:
                raise UserError(
                    f"the {side} of pair {number} has {len(ids)} tokens; this model takes at "
                    f"most {limit - 1} (model.max_positions={limit}, one for BOS/EOS)"
                )
            pieces = tokenizer.pieces(text)
            if len(pieces) != len(ids):
                raise UserError(
                    f"the {side} of pair {number}: {len(ids)} token ids but {len(pieces)} pieces"
                )
            sides.append((ids, pieces))
        (src_ids, src_pieces), (tgt_ids, tgt_pieces) = sides
        encoded.append(((src_ids, tgt_ids), (src_pieces, tgt_pieces)))
    return encoded


def copy_view(
    trained: "TrainedModel", pairs: Sequence[tuple[str, str]], examples: Sequence[Example]
) -> list[ExtendedExample] | None:
    """A copy model's extended-vocabulary view of the pairs (the labels it is scored on, as
    `attnseq score` scores them); None for other models."""
    if not trained.cfg.model.copy:
        return None
    return extend_examples(pairs, examples, trained.tokenizers.src, trained.tokenizers.tgt)


def attribute_examples(
    model: Seq2Seq,
    examples: Sequence[Example],
    method: str,
    *,
    layer: int | None = None,
    head: int | None = None,
    batch_size: int = 16,
    settings: GradientSettings = GradientSettings(),
    device: torch.device | str | None = None,
    extended: Sequence[ExtendedExample] | None = None,
) -> list[tuple[Tensor, Tensor | None, Tensor | None]]:
    """(source (T + 1, S), target prefix (T + 1, T + 1) or None, source share (T + 1,) or
    None) of every encoded example, on the CPU, each row non-negative and summing to one.

    `method` is canonical and fits the model (`check_method_fits`); `extended`: a copy
    model's view of the examples (`copy_view`).
    """
    if method in GRADIENT_METHODS:
        raws = raw_attributions(
            model,
            examples,
            method,
            batch_size=batch_size,
            settings=settings,
            device=device,
            extended=extended,
        )
        return [_normalised_gradients(raw) for raw in raws]
    results: list[tuple[Tensor, Tensor | None, Tensor | None]] = [None] * len(examples)  # type: ignore[list-item]
    for i, weights in _attention_maps(model, examples, method, layer, head, batch_size, device):
        source, prefix = weights
        results[i] = (source, prefix, None)
    return results


# --------------------------------------------------------------------------- attention
def teacher_forced_attention(model: Seq2Seq, batch: Batch) -> Tensor:
    """Teacher-forced cross-attention of one batch: (B, T + 1, S) or (B, L, H, T + 1, S),
    float32 on the CPU.

    Copy models need the source in the extended vocabulary; it only places the copy mass on
    output ids, never the attention, so any ids of the target vocabulary serve (the source's
    own ids may lie beyond it when the two vocabularies differ): id 0 everywhere.

    Raises:
        ValueError: a model that returns no attention.
    """
    if isinstance(model, TransformerSeq2Seq):
        weights = transformer_cross_attention(model, batch.src, batch.src_lengths, batch.tgt_in)
    else:
        copy = _attention_copy_inputs(model, batch)
        output = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True, **copy)
        if output.attention is None:
            raise ValueError(f"{type(model).__name__} returns no attention weights")
        weights = output.attention
    weights = weights.float().cpu()
    if weights.dim() not in (3, 5):
        raise ValueError(f"unexpected attention shape {tuple(weights.shape)}")
    return weights


def _attention_copy_inputs(model: Seq2Seq, batch: Batch) -> dict[str, Any]:
    """The copy inputs of a pass that reads attention only (`teacher_forced_attention`)."""
    if not getattr(model, "copy", False):
        return {}
    return {"src_ext": torch.zeros_like(batch.src), "n_oov": 0}


def transformer_cross_attention(
    model: TransformerSeq2Seq, src: Tensor, src_lengths: Tensor, tgt_in: Tensor
) -> Tensor:
    """Every decoder layer's cross-attention, (B, L, H, T, S), teacher-forced: what the
    model's forward returns with need_weights, less the work alignment does not read (the
    encoder's self-attention weights, which the fused path skips, and the output projection)."""
    memory, src_mask, _ = model.encode(src, src_lengths, need_weights=False)
    positions = make_positions(tgt_in.size(1), device=tgt_in.device)  # (T,)
    memory_kvs = [layer.memory_kv(memory) for layer in model.decoder_layers]
    decoder = model.run_decoder(tgt_in, positions, memory_kvs, src_mask, None, True, None)
    return torch.stack(decoder.cross_weights(), dim=1)


def choose_map(weights: Tensor, layer: int | None, head: int | None) -> Tensor:
    """The (..., T, S) map of one example's attention: an RNN's (T, S) as it is; from a
    transformer's (L, H, T, S) layer `layer` (1-based, None: the last) and its head `head`
    (1-based) or, with None, the mean of its heads (pooling is linear, so the mean may be
    taken before or after pooling to words).

    Raises:
        ValueError: a layer or head outside the model's.
    """
    if weights.dim() == 2:
        return weights
    layers, heads = weights.shape[:2]
    chosen = layers if layer is None else layer
    if not 1 <= chosen <= layers:
        raise ValueError(f"layer must be in 1..{layers}, got {chosen}")
    if head is None:
        return weights[chosen - 1].mean(dim=0)
    if not 1 <= head <= heads:
        raise ValueError(f"head must be in 1..{heads}, got {head}")
    return weights[chosen - 1, head - 1]


def length_sorted_batches(
    model: Seq2Seq,
    examples: Sequence[Example],
    batch_size: int,
    device: torch.device | str,
    extended: Sequence[ExtendedExample] | None = None,
    max_steps: int | None = None,
) -> Iterator[tuple[list[int], Batch]]:
    """(example indices, collated batch on `device`) in length order: sorted batches pad less;
    with `extended` a copy batch (extended labels, the source in the extended vocabulary).
    A batch holds at most `batch_size` pairs and, with `max_steps`, at most that many decoder
    steps in all (one pair at least): the gradient methods make a row of each step."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i][0]), len(examples[i][1])))
    chunks: list[list[int]] = [[]]
    steps = 0
    for i in order:
        more = len(examples[i][1]) + 1
        full = len(chunks[-1]) == batch_size or (max_steps is not None and steps + more > max_steps)
        if chunks[-1] and full:
            chunks.append([])
            steps = 0
        chunks[-1].append(i)
        steps += more
    for chunk in chunks if order else []:
        batch = collate(
            [examples[i] for i in chunk],
            indices=chunk,
            pad_id=model.pad_id,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
            extended=None if extended is None else [extended[i] for i in chunk],
        )
        yield chunk, batch.to(device)


def _attention_maps(
    model: Seq2Seq,
    examples: Sequence[Example],
    method: str,
    layer: int | None,
    head: int | None,
    batch_size: int,
    device: torch.device | str | None,
) -> Iterator[tuple[int, tuple[Tensor, Tensor | None]]]:
    """(example index, (source (T + 1, S), prefix or None)) of attention, shift-att or rollout."""
    device = _device_of(model) if device is None else device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for chunk, batch in length_sorted_batches(model, examples, batch_size, device):
                sizes = [(len(examples[i][0]), len(examples[i][1]) + 1) for i in chunk]
                if method == "rollout":
                    assert isinstance(model, TransformerSeq2Seq)
                    maps = _rollout_batch(model, batch, sizes, layer, head)
                else:
                    shift = method == "shift-att"
                    maps = _attention_batch(model, batch, sizes, shift, layer, head)
                for b, i in enumerate(chunk):
                    yield i, maps[b]
    finally:
        model.train(was_training)


def _attention_batch(
    model: Seq2Seq,
    batch: Batch,
    sizes: Sequence[tuple[int, int]],
    shift: bool,
    layer: int | None,
    head: int | None,
) -> list[tuple[Tensor, None]]:
    """Attention or Shift-Att maps of one batch, trimmed to each pair's (S, T + 1) `sizes`:
    row t is α[t] of the step predicting piece t, or with `shift` α[t + 1] of the step that
    reads it (Chen, Sun, Li & Liu 2020, EMNLP, section 3.1)."""
    weights = teacher_forced_attention(model, batch)  # (B, [L, H,] T + 1, S)
    maps = []
    for b, (S, steps) in enumerate(sizes):
        chosen = choose_map(weights[b], layer, head)[:steps, :S]  # (T + 1, S)
        if shift:  # row t <- step t + 1; the </s> row (no step reads </s>) repeats step T
            chosen = torch.cat([chosen[1:], chosen[-1:]])
        maps.append((_rows_to_one(chosen), None))
    return maps


def _rows_to_one(scores: Tensor, allowed: Tensor | None = None) -> Tensor:
    """Non-negative `scores` (N, M) with each row divided by its sum; a row without mass
    (nothing reaches the output) becomes uniform over its `allowed` (N, M) bool entries
    (default: all)."""
    if allowed is None:
        allowed = torch.ones_like(scores, dtype=torch.bool)
    scores = scores.float().clamp_min(0) * allowed
    totals = scores.sum(dim=-1, keepdim=True)  # (N, 1)
    uniform = allowed.float() / allowed.sum(dim=-1, keepdim=True).clamp_min(1)
    return torch.where(totals > 0, scores / totals.clamp_min(1e-30), uniform)


# --------------------------------------------------------------------------- rollout
def rollout(weights: Tensor) -> Tensor:
    """Attention rollout through the layers (Abnar & Zuidema 2020, "Quantifying Attention Flow
    in Transformers", ACL, section 3): the residual connection as an identity half.

    Args:
        weights: (L, H, N, N) self-attention of one sequence, layer 1 first (extra columns,
            e.g. memory slots, already dropped).

    Returns:
        (N, N) R = Â_L ··· Â_1 with Â_l = 0.5 · mean_h A_l + 0.5 · I, rows renormalised;
        R[i, j]: how much position i of the top layer holds of input position j.
    """
    n = weights.size(-1)
    identity = torch.eye(n, dtype=weights.dtype, device=weights.device)
    result = identity
    for layer_weights in weights:  # (H, N, N), from the first layer up
        mixed = 0.5 * layer_weights.mean(dim=0) + 0.5 * identity
        mixed = mixed / mixed.sum(dim=-1, keepdim=True).clamp_min(1e-30)
        result = mixed @ result
    return result


def _rollout_batch(
    model: TransformerSeq2Seq,
    batch: Batch,
    sizes: Sequence[tuple[int, int]],
    layer: int | None,
    head: int | None,
) -> list[tuple[Tensor, Tensor]]:
    """Rollout maps of one batch, with C the chosen layer's cross-attention (T + 1, S):

        source = C · R_enc   (R_enc (S, S): the encoder's rollout)
        prefix = R_dec       (T + 1, T + 1): the decoder's self-attention rolled out up to it

    The source row is not pushed through R_dec, so that it says what this step reads, not
    what the whole prefix has read. Memory slots' columns are dropped; a kind that returns no
    self-attention weights is refused."""
    copy = _attention_copy_inputs(model, batch)
    output = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True, **copy)
    encoder = output.encoder_self_attention  # (B, L_enc, H, S, S [+ slots])
    decoder = output.decoder_self_attention  # (B, L, H, T, T [+ slots])
    if encoder is None or decoder is None or encoder.size(1) != len(model.encoder.layers):
        raise UserError(
            "rollout needs the self-attention weights of every layer; this model's "
            "self-attention kind returns none (model.attention.kind)"
        )
    assert output.attention is not None
    cross, encoder, decoder = output.attention.float(), encoder.float(), decoder.float()
    chosen_layer = cross.size(1) if layer is None else layer
    maps = []
    for b, (S, steps) in enumerate(sizes):
        through_encoder = rollout(encoder[b, :, :, :S, :S])  # (S, S)
        reads = choose_map(cross[b], layer, head)[:steps, :S]  # (T + 1, S)
        source = reads @ through_encoder
        prefix = rollout(decoder[b, :chosen_layer, :, :steps, :steps])  # (T + 1, T + 1)
        maps.append((_rows_to_one(source).cpu(), _rows_to_one(prefix.tril()).cpu()))
    return maps


# --------------------------------------------------------------------------- gradients
def raw_attributions(
    model: Seq2Seq,
    examples: Sequence[Example],
    method: str,
    *,
    batch_size: int = 16,
    settings: GradientSettings = GradientSettings(),
    device: torch.device | str | None = None,
    extended: Sequence[ExtendedExample] | None = None,
) -> list[RawAttribution]:
    """The signed scores of a gradient method (`GRADIENT_METHODS`) for every encoded example,
    in order, on the CPU; `extended` a copy model's view (`copy_view`). Every (pair, step) is
    a row of a batch, the rows of a group of steps a pass on their prefix (`_gradient_batch`).
    A progress bar on a terminal counts the steps: a long pair takes seconds."""
    check_captum()
    device = _device_of(model) if device is None else device
    results: list[RawAttribution] = [None] * len(examples)  # type: ignore[list-item]
    was_training = model.training
    model.eval()
    try:
        # cuDNN's RNN backward runs in training mode only: the native kernels do it in eval
        with (
            torch.enable_grad(),
            torch.backends.cudnn.flags(enabled=False),
            counting(method, sum(len(tgt) + 1 for _, tgt in examples), unit="steps") as counter,
        ):
            batches = length_sorted_batches(
                model, examples, batch_size, device, extended, _ROWS_PER_PASS
            )
            for chunk, batch in batches:
                sizes = [(len(examples[i][0]), len(examples[i][1]) + 1) for i in chunk]
                rows = _Rows.of(model, batch, sizes, chunk)
                raws = _gradient_batch(model, rows, method, settings, counter.advance)
                for b, raw in enumerate(raws):
                    results[chunk[b]] = raw
    finally:
        model.train(was_training)
    return results


def _device_of(model: nn.Module) -> torch.device:
    """Where the model's parameters are."""
    return next(model.parameters()).device


def embedding_modules(model: Seq2Seq) -> tuple[nn.Embedding, nn.Embedding]:
    """(source embedding, target embedding) of a model: one module when they are shared."""
    if isinstance(model, TransformerSeq2Seq):
        return model.src_embed, model.tgt_embed
    encoder = getattr(model, "encoder", None)
    source, target = getattr(encoder, "embedding", None), getattr(model, "embedding", None)
    if not isinstance(source, nn.Embedding) or not isinstance(target, nn.Embedding):
        raise UserError(f"cannot find the token embeddings of {type(model).__name__}")
    return source, target


@dataclass
class _Rows:
    """One batch as (pair, step) rows: row r is pair `pair[r]` with the output of step
    `step[r]` explained. src (R, S), src_lengths (R,), tgt_in (R, T + 1) and the embedded
    inputs src_x (R, S, E), tgt_x (R, T + 1, E), which the gradient methods attribute to
    (positional encodings and scales come after them); labels (R,) the explained ids; copy:
    the copy model's src_ext (R, S) and n_oov; sizes (S, T + 1) and indices of the pairs."""

    pair: Tensor
    step: Tensor
    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    labels: Tensor
    src_x: Tensor
    tgt_x: Tensor
    copy: dict[str, Any]
    sizes: Sequence[tuple[int, int]]
    indices: Sequence[int]

    @classmethod
    def of(
        cls, model: Seq2Seq, batch: Batch, sizes: Sequence[tuple[int, int]], indices: list[int]
    ) -> "_Rows":
        """The rows of `batch`, whose pairs have (S, T + 1) `sizes`."""
        pair = torch.tensor([b for b, (_, steps) in enumerate(sizes) for _ in range(steps)])
        step = torch.tensor([t for _, steps in sizes for t in range(steps)])
        pair, step = pair.to(batch.src.device), step.to(batch.src.device)
        src_embedding, tgt_embedding = embedding_modules(model)
        with torch.no_grad():
            src_x = src_embedding(batch.src)[pair]  # (R, S, E)
            tgt_x = tgt_embedding(batch.tgt_in)[pair]  # (R, T + 1, E)
        src_x.requires_grad_()  # the inputs captum differentiates by
        tgt_x.requires_grad_()
        copy = {}
        if getattr(model, "copy", False):
            inputs = batch.copy_inputs()
            copy = {"src_ext": inputs["src_ext"][pair], "n_oov": inputs["n_oov"]}
        labels = batch.tgt_out[pair, step]  # (R,)
        return cls(
            pair=pair,
            step=step,
            src=batch.src[pair],
            src_lengths=batch.src_lengths[pair],
            tgt_in=batch.tgt_in[pair],
            labels=labels,
            src_x=src_x,
            tgt_x=tgt_x,
            copy=copy,
            sizes=sizes,
            indices=indices,
        )

    def prefix(self, selected: Tensor, length: int) -> "_Rows":
        """The rows `selected` (N,) with the decoder inputs cut to their first `length`
        positions (tgt_in (N, length), tgt_x (N, length, E)); pair, sizes and indices stay
        those of the batch."""
        copy = dict(self.copy)
        if "src_ext" in copy:
            copy["src_ext"] = copy["src_ext"][selected]
        src_x = self.src_x.detach()[selected].requires_grad_()
        tgt_x = self.tgt_x.detach()[selected, :length].requires_grad_()
        return _Rows(
            pair=self.pair[selected],
            step=self.step[selected],
            src=self.src[selected],
            src_lengths=self.src_lengths[selected],
            tgt_in=self.tgt_in[selected, :length].contiguous(),
            labels=self.labels[selected],
            src_x=src_x,
            tgt_x=tgt_x,
            copy=copy,
            sizes=self.sizes,
            indices=self.indices,
        )

    def arguments(self) -> tuple[Any, ...]:
        """The forward function's arguments after the two embedded inputs."""
        return (
            self.src,
            self.src_lengths,
            self.tgt_in,
            self.step,
            self.labels,
            self.copy.get("src_ext"),
        )


def _step_scores(model: Seq2Seq, n_oov: int) -> Callable[..., Tensor]:
    """f(src_x, tgt_x, src, src_lengths, tgt_in, step, labels, src_ext) -> (R,): row r's
    log p(labels[r]) at decoder step step[r], with the token embeddings replaced by the given
    src_x (R, S, E) and tgt_x (R, T + 1, E): the function captum differentiates. The output
    projection reads each row's own step only (`only_the_step`)."""
    src_embedding, tgt_embedding = embedding_modules(model)
    projection = None if getattr(model, "copy", False) else output_projection(model)

    def scores(
        src_x: Tensor,
        tgt_x: Tensor,
        src: Tensor,
        src_lengths: Tensor,
        tgt_in: Tensor,
        step: Tensor,
        labels: Tensor,
        src_ext: Tensor | None,
    ) -> Tensor:
        copy = {} if src_ext is None else {"src_ext": src_ext, "n_oov": n_oov}
        replaced = [(src_embedding, src, src_x), (tgt_embedding, tgt_in, tgt_x)]
        with embeddings_replaced(replaced), only_the_step(projection, step):
            output = model(src, src_lengths, tgt_in, **copy)
        log_probs = output.logits.float().log_softmax(dim=-1)  # (R, T + 1 or 1, V)
        rows = torch.arange(log_probs.size(0), device=log_probs.device)
        return log_probs[rows, step if log_probs.size(1) == tgt_in.size(1) else 0, labels]

    return scores


def output_projection(model: Seq2Seq) -> nn.Linear | None:
    """The layer that turns decoder states into logits over the vocabulary, or None."""
    layer = getattr(model, "output_proj", None) or getattr(model, "output", None)
    return layer if isinstance(layer, nn.Linear) else None


@contextmanager
def only_the_step(projection: nn.Linear | None, step: Tensor) -> Iterator[None]:
    """Within the block, the output projection reads row r's decoder state at step[r] only,
    (R, T + 1, d) -> (R, 1, d): the logits of the other steps, which the row does not explain,
    are most of a pass's work with a large vocabulary. Nothing with None (a copy model mixes
    every step's logits with its attention)."""
    if projection is None:
        yield
        return

    def select(_module: nn.Module, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        (states,) = inputs
        if states.dim() != 3 or states.size(0) != step.size(0):
            return inputs
        rows = torch.arange(states.size(0), device=states.device)
        return (states[rows, step].unsqueeze(1),)

    handle = projection.register_forward_pre_hook(select)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def embeddings_replaced(replaced: Sequence[tuple[nn.Embedding, Tensor, Tensor]]) -> Iterator[None]:
    """Within the block, an embedding module called with the ids `ids` (N, M), a view of them
    (an RNN decoder's column ids[:, t]) or an equal copy (a pointer model's ids read into its
    vocabulary) returns the rows of `vectors` (N, M, E) of those positions instead of looking
    the ids up; `replaced` holds (module, ids, vectors). A call with other ids is an error: the
    model embeds something whose positions cannot be followed."""
    by_module: dict[int, list[tuple[Tensor, Tensor]]] = {}
    for module, ids, vectors in replaced:
        by_module.setdefault(id(module), []).append((ids, vectors))
    handles = []

    def hook(module: nn.Module, inputs: tuple[Tensor, ...], _output: Tensor) -> Tensor:
        return _substitute(inputs[0], by_module[id(module)])

    seen = set()
    for module, _, _ in replaced:
        if id(module) not in seen:
            seen.add(id(module))
            handles.append(module.register_forward_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _substitute(ids: Tensor, candidates: Sequence[tuple[Tensor, Tensor]]) -> Tensor:
    """The vectors (ids.shape + (E,)) standing for `ids`: a registered ids tensor or a view of
    it first, then an equal copy or a view of one (the last registered first: the decoder
    input, which a pointer model copies); the positions of a view follow from its strides and
    offset."""
    for registered, vectors in candidates:
        if registered.is_contiguous() and _storage(ids) == _storage(registered):
            return _gather(vectors, ids, registered)
    base = ids if ids._base is None else ids._base
    for registered, vectors in reversed(candidates):
        same = base.shape == registered.shape and _storage(base) == _storage(ids)
        if same and base.is_contiguous() and torch.equal(base, registered):
            return _gather(vectors, ids, base)
    raise UserError(
        "the gradient methods cannot follow this model's embedded positions (it embeds ids that "
        "are neither the source nor the decoder input); use attention"
    )


def _storage(tensor: Tensor) -> int:
    """The address of the memory a tensor views."""
    return tensor.untyped_storage().data_ptr()


def _gather(vectors: Tensor, ids: Tensor, base: Tensor) -> Tensor:
    """The rows of `vectors` (N, M, E) at the positions `ids` takes in `base` (N, M), the
    contiguous tensor it views: the same view of 0 .. N·M − 1 gives the flat positions."""
    flat = torch.arange(base.numel(), device=ids.device)
    positions = flat.as_strided(
        ids.shape, ids.stride(), ids.storage_offset() - base.storage_offset()
    )
    return vectors.reshape(-1, vectors.size(-1))[positions]


def _gradient_batch(
    model: Seq2Seq,
    rows: _Rows,
    method: str,
    settings: GradientSettings,
    advance: Callable[[int], None] = lambda _n: None,
) -> list[RawAttribution]:
    """The signed scores of every pair of one batch (rows: `_Rows.of`), a_t(s) summed over
    the embedding dimension:

        gradient × input      a_t(s) = ∇_{e_s} f_t · e_s
        integrated gradients  a_t(s) = (e_s − e'_s) · ∫_0^1 ∇_{e_s} f_t(e' + α (e − e')) dα

    (Shrikumar et al. 2016, Denil et al. 2014; Sundararajan, Taly & Yan 2017, "Axiomatic
    Attribution for Deep Networks", ICML, eq. 1), the integral by `ig_steps` Gauss-Legendre
    points from e' = 0, every model's <pad> embedding, "nothing here"; summed over all
    positions the attributions give f_t(e) − f_t(0) (completeness).

    The decoder is causal, so step t's score reads the decoder inputs 0..t only: the rows of
    a group of steps (`_step_groups`) run on the prefix the group's last step reads
    (`_Rows.prefix`), not on all T + 1 inputs; the attributions to the inputs after t are
    zero either way. `advance(n)` after the n rows of each group."""
    R, S, steps = rows.src_x.size(0), rows.src_x.size(1), rows.tgt_x.size(1)
    src_raw = rows.src_x.new_zeros(R, S)
    tgt_raw = rows.tgt_x.new_zeros(R, steps)
    at_input = rows.src_x.new_zeros(R)
    baseline_scores = rows.src_x.new_zeros(R) if method == "integrated-gradients" else None
    noise = None
    if method == "smoothgrad":
        noise = _noise(rows, settings, _noise_sigmas(model, settings))
    for first, last in _step_groups(steps):
        in_group = (rows.step >= first) & (rows.step <= last)
        selected = in_group.nonzero().squeeze(1)  # (N,) the rows of steps first..last
        if selected.numel() == 0:
            continue
        length = last + 1  # the decoder inputs these steps read
        part = rows.prefix(selected, length)
        part_noise = None
        if noise is not None:
            part_noise = (noise[0][:, selected], noise[1][:, selected, :length])
        src_a, tgt_a, scores_at, baseline = _gradient_rows(
            model, part, method, settings, part_noise
        )
        src_raw[selected] = src_a
        tgt_raw[selected, :length] = tgt_a
        at_input[selected] = scores_at
        if baseline_scores is not None and baseline is not None:
            baseline_scores[selected] = baseline
        advance(selected.numel())
    return _per_pair(rows, src_raw, tgt_raw, at_input, baseline_scores)


def _step_groups(steps: int) -> list[tuple[int, int]]:
    """(first, last) steps of each pass over a batch of `steps` decoder steps: groups of about
    `_STEPS_PER_GROUP`, each run on the prefix its last step reads."""
    groups = max(1, round(steps / _STEPS_PER_GROUP))
    bounds = [round(steps * g / groups) for g in range(groups + 1)]
    return [(bounds[g], bounds[g + 1] - 1) for g in range(groups)]


def _gradient_rows(
    model: Seq2Seq,
    rows: _Rows,
    method: str,
    settings: GradientSettings,
    noise: tuple[Tensor, Tensor] | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """(source (N, S), prefix (N, P), f at the input (N,), f at the baseline (N,) or None)
    of N rows whose decoder inputs are cut to P positions; `noise` SmoothGrad's ε of them,
    (K, N, S, E) and (K, N, P, E)."""
    from captum.attr import InputXGradient, IntegratedGradients

    scores = _step_scores(model, rows.copy.get("n_oov", 0))
    inputs, arguments = (rows.src_x, rows.tgt_x), rows.arguments()
    baseline_scores = None
    if method == "smoothgrad":
        assert noise is not None
        src_raw, tgt_raw = _smoothgrad(scores, rows, settings, noise)
    else:
        if method == "gradient-x-input":
            src_a, tgt_a = InputXGradient(scores).attribute(
                inputs, additional_forward_args=arguments
            )
        else:
            zeros = (torch.zeros_like(rows.src_x).detach(), torch.zeros_like(rows.tgt_x).detach())
            n_rows = rows.src_x.size(0)
            src_a, tgt_a = IntegratedGradients(scores).attribute(
                inputs,
                baselines=zeros,
                additional_forward_args=arguments,
                n_steps=settings.ig_steps,
                internal_batch_size=n_rows * max(1, _ROWS_PER_PASS // n_rows),
            )
            with torch.no_grad():
                baseline_scores = scores(*zeros, *arguments).detach()
        # a_t(s) = sum over the embedding dimension: (N, S) and (N, P)
        src_raw, tgt_raw = src_a.detach().sum(dim=-1), tgt_a.detach().sum(dim=-1)
    with torch.no_grad():
        at_input = scores(*inputs, *arguments).detach()
    return src_raw, tgt_raw, at_input, baseline_scores


def _noise_sigmas(model: Seq2Seq, settings: GradientSettings) -> list[float]:
    """SmoothGrad's σ of the source and the target embedding: `smoothgrad_noise` × the
    standard deviation of the embedding matrix's entries (not its range, set by a few extreme
    entries)."""
    with torch.no_grad():
        spreads = [float(e.weight.std()) for e in embedding_modules(model)]
    return [settings.smoothgrad_noise * spread for spread in spreads]


def _smoothgrad(
    scores: Callable[..., Tensor],
    rows: _Rows,
    settings: GradientSettings,
    noise: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor]:
    """SmoothGrad of gradient × input (Smilkov et al. 2017, "SmoothGrad: removing noise by
    adding noise"; Ding et al. 2019), (N, S) and (N, P):

        a_t(s) = mean_k |∇_{e_s} f_t(e + ε_k) · (e_s + ε_k,s)|,   ε_k ~ N(0, σ²)

    `noise`: the ε_k of the rows, (K, N, S, E) and (K, N, P, E) (`_noise`). The magnitude is
    taken per copy: signed products would cancel. captum's InputXGradient computes the
    products of as many copies at once as `_ROWS_PER_PASS` allows (the noise is drawn per
    pair from its own seeded generator: captum's NoiseTunnel draws from the global generator
    over the whole batch, which would tie a pair's map to its neighbours)."""
    from captum.attr import InputXGradient

    src_noise, tgt_noise = noise
    K, N = src_noise.shape[:2]
    explainer = InputXGradient(scores)
    src_total = rows.src_x.new_zeros(rows.src_x.shape[:2])  # (N, S)
    tgt_total = rows.tgt_x.new_zeros(rows.tgt_x.shape[:2])  # (N, P)
    per_pass = max(1, _ROWS_PER_PASS // N)  # copies in one pass
    for first in range(0, K, per_pass):
        k = min(per_pass, K - first)
        noisy = (
            (rows.src_x.unsqueeze(0) + src_noise[first : first + k]).flatten(0, 1),
            (rows.tgt_x.unsqueeze(0) + tgt_noise[first : first + k]).flatten(0, 1),
        )
        noisy = tuple(x.detach().requires_grad_() for x in noisy)
        arguments = tuple(_repeated(a, k) for a in rows.arguments())
        src_a, tgt_a = explainer.attribute(noisy, additional_forward_args=arguments)
        src_total += src_a.detach().sum(dim=-1).abs().view(k, N, -1).sum(dim=0)
        tgt_total += tgt_a.detach().sum(dim=-1).abs().view(k, N, -1).sum(dim=0)
    return src_total / K, tgt_total / K


def _repeated(argument: Any, copies: int) -> Any:
    """A row argument (N, ...) of the scores function for `copies` stacked copies of the rows,
    (copies · N, ...); anything else as it is."""
    if not isinstance(argument, Tensor) or copies == 1:
        return argument
    return argument.repeat(copies, *([1] * (argument.dim() - 1)))


def _noise(
    rows: _Rows, settings: GradientSettings, sigmas: Sequence[float]
) -> tuple[Tensor, Tensor]:
    """SmoothGrad's noise ε (K, R, S, E) and (K, R, T + 1, E): N(0, σ²) on each pair's real
    positions, drawn from a generator seeded with (seed, the pair's index) in a fixed order
    (source, then prefix, step by step), zero on padding."""
    K = settings.smoothgrad_samples
    src_noise = rows.src_x.new_zeros(K, *rows.src_x.shape)
    tgt_noise = rows.tgt_x.new_zeros(K, *rows.tgt_x.shape)
    E_src, E_tgt = rows.src_x.size(-1), rows.tgt_x.size(-1)
    start = 0
    for (S, steps), index in zip(rows.sizes, rows.indices, strict=True):
        generator = torch.Generator().manual_seed(settings.seed * 1_000_003 + index)
        src_part = torch.randn(K, steps, S, E_src, generator=generator) * sigmas[0]
        tgt_part = torch.randn(K, steps, steps, E_tgt, generator=generator) * sigmas[1]
        src_noise[:, start : start + steps, :S] = src_part.to(src_noise)
        tgt_noise[:, start : start + steps, :steps] = tgt_part.to(tgt_noise)
        start += steps
    return src_noise, tgt_noise


def _per_pair(
    rows: _Rows,
    src_raw: Tensor,
    tgt_raw: Tensor,
    at_input: Tensor,
    baseline_scores: Tensor | None,
) -> list[RawAttribution]:
    """Row scores (R, S), (R, T + 1), (R,) cut into each pair's RawAttribution on the CPU."""
    results, start = [], 0
    for S, steps in rows.sizes:
        part = slice(start, start + steps)
        results.append(
            RawAttribution(
                src_raw[part, :S].cpu(),
                tgt_raw[part, :steps].tril().cpu(),  # step t reads inputs 0..t only
                at_input[part].cpu(),
                None if baseline_scores is None else baseline_scores[part].cpu(),
            )
        )
        start += steps
    return results


def _normalised_gradients(raw: RawAttribution) -> tuple[Tensor, Tensor, Tensor]:
    """(source, prefix, source share) of a pair's signed scores: absolute values (a piece that
    lowers the probability explains as much as one that raises it), each row normalised on its
    own, and the source's share of the two's mass."""
    src_mass, tgt_mass = raw.source.abs(), raw.target_prefix.abs()
    steps = tgt_mass.size(0)
    causal = torch.ones(steps, steps, dtype=torch.bool).tril()
    src_total, tgt_total = src_mass.sum(dim=1), tgt_mass.sum(dim=1)
    share = src_total / (src_total + tgt_total).clamp_min(1e-30)
    return _rows_to_one(src_mass), _rows_to_one(tgt_mass, causal), share
