"""Word alignments of given sentence pairs by forced decoding: the target is teacher-forced
through a trained model and its cross-attention is read, pooled to words and turned into one
link per target word. The one path from attention to word links: `attnseq align`
(`align_sentences`) and the AER of `attnseq eval --alignments` and of validation
(model_alignment.py) both run `forced_word_attention`, `select_map` and `argmax_alignment`.

Steps. Each sentence is encoded whole and split into its pieces (`encode_sentence`); the pairs
are sorted by length and padded into batches of `batch_size` pairs; one forward pass per batch
with `need_weights=True` gives the cross-attention α of every decoder step; each pair's map is
pooled to words (alignment.word_attention), one map is chosen (`select_map`) and each target
word is linked to the source word it attends to most (alignment.argmax_alignment).

Decoder steps. With teacher forcing, step t (0-based) has input y_{t-1} (y_{-1} = <s>) and
predicts y_t; a target of n pieces has n + 1 steps, the last one predicting </s>. α[t, s] is the
attention of step t on source piece s: (n + 1, S) per pair.

Methods (`AlignmentMethod`):

- ``attention``: the row of the step that *predicts* piece t, A[t, s] = α[t, s] (the alignment
  figures of Bahdanau et al. 2015); the </s> row is dropped.
- ``shift-att`` (Chen, Sun, Li & Liu 2020, "Accurate Word Alignment Induction from Neural
  Machine Translation", EMNLP, section 3.1): the row of the step whose *input* is piece t,
  A[t, s] = α[t + 1, s]. At that step the decoder has read y_t, and the paper shows this row
  aligns y_t much better than the row that predicts it. The first row (input <s>) is dropped;
  the last piece's row is the step that predicts </s> (its input is the last piece), so every
  piece, the last included, has a row.

Which map (transformers): `layer` (1-based, default the last) and `head` (1-based, default the
mean of the layer's heads); an RNN has one map.

Word level. Pieces are merged back into the whitespace-separated words of each line with
`alignment.word_ids`: a word tokenizer's piece is a word; a char tokenizer's whitespace
characters separate words and belong to none; a sentencepiece piece starting with "▁" starts a
new word (the first piece starts word 0 either way). The word matrix is

    W[a, b] = 1/|P_a| * sum_{t in P_a} sum_{s in Q_b} A[t, s]

(P_a: the pieces of target word a, Q_b: of source word b): a source word receives the mass of all
its pieces, a target word's row is the mean of its pieces' rows, so it stays a distribution.
Every line must tokenize into exactly its whitespace words (else `encode_sentence` says which
line does not), so link (i, j) names the i-th source and the j-th target word of the line.

Shapes: B batch, T target pieces (+1: the </s> row), S source pieces, L layers, H heads, Tw/Sw
target/source words.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from attnseq.analysis.alignment import Alignment, argmax_alignment, word_attention, word_ids
from attnseq.data.batching import Example, collate
from attnseq.data.tokenizers import Tokenizer
from attnseq.errors import UserError
from attnseq.models.positional import make_positions, position_limit
from attnseq.models.seq2seq import Seq2Seq
from attnseq.models.transformer import TransformerSeq2Seq

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel

ALIGNMENT_METHODS: tuple[str, ...] = ("attention", "shift-att")
WordIds = tuple[list[int], list[int]]  # (source word of each source piece, same for target)


@dataclass(frozen=True)
class AlignmentMethod:
    """How attention becomes word links: `name` one of `ALIGNMENT_METHODS`; for transformers
    `layer` and `head` 1-based, None for the last layer and the mean of its heads."""

    name: str = "attention"
    layer: int | None = None
    head: int | None = None

    @property
    def shift(self) -> bool:
        """True when target piece t is read from the row of step t + 1 (Shift-Att)."""
        return self.name == "shift-att"

    def describe(self, layers: int = 0) -> str:
        """E.g. "shift-att, layer 3, head mean"; `layers`: the model's, 0 for an RNN."""
        if not layers:
            return self.name
        layer = layers if self.layer is None else self.layer
        head = "head mean" if self.head is None else f"head {self.head}"
        return f"{self.name}, layer {layer}, {head}"


@dataclass
class EncodedSentence:
    """A line encoded whole: its ids, its pieces (one per id) and its whitespace-word count."""

    ids: list[int]
    pieces: list[str]
    n_words: int


@dataclass
class ForcedAlignments:
    """What `align_sentences` returns for N pairs.

    links: per pair, the (source word, target word) links, 0-based.
    soft: per pair, the (Tw, Sw) float32 word-level matrix the links were read from (row a: how
        target word a's attention spreads over the source words).
    method: the method, with its description for this model in `label`.
    """

    links: list[Alignment]
    soft: list[np.ndarray]
    method: AlignmentMethod
    label: str = field(default="")


def encode_sentence(
    tokenizer: Tokenizer, text: str, where: str, max_length: int | None = None
) -> EncodedSentence:
    """One line encoded whole (no truncation); UserError (naming `where`) if it is empty, its
    pieces do not form exactly its whitespace-separated words, or it is longer than the model
    takes (`max_length`: the model's positions, one of them for BOS/EOS)."""
    kind = type(tokenizer).kind
    if not text.strip():
        raise UserError(f"{where} is empty: every line needs a sentence")
    ids, pieces = tokenizer.encode(text), tokenizer.pieces(text)
    if len(ids) != len(pieces):
        raise UserError(f"{where}: {len(ids)} token ids but {len(pieces)} pieces")
    n_words = max(word_ids(pieces, kind), default=-1) + 1
    if n_words != len(text.split()):
        raise UserError(
            f"{where}: the {kind} tokenizer's pieces form {n_words} words, but the line "
            f"has {len(text.split())} whitespace-separated words, which the word indices count"
        )
    if max_length is not None and len(ids) + 1 > max_length:
        raise UserError(f"{where} has {len(ids)} tokens; the model takes at most {max_length - 1}")
    return EncodedSentence(ids, pieces, n_words)


# --------------------------------------------------------------------------- the model pass
@torch.no_grad()
def forced_word_attention(
    model: Seq2Seq,
    examples: Sequence[Example],
    words: Sequence[WordIds],
    *,
    shift: bool = False,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    layer: int | None = None,
) -> Iterator[tuple[int, Tensor]]:
    """(example index, word attention) of every example, batch by batch in length order.

    Args:
        model: any `Seq2Seq`; in eval mode during the pass, its mode restored after.
        examples: (source ids, target ids) without BOS/EOS.
        words: the word id of every source and target piece of each example (`word_ids`).
        shift: read piece t from the row of step t + 1 (Shift-Att) instead of step t.
        device: where the model runs.
        batch_size: pairs per forward pass.
        layer: a transformer's decoder layer (1-based) to pool alone, when only it is read
            (pooling the other layers' maps would be wasted); None pools every layer.

    Yields:
        (i, W): W (Tw, Sw) for an RNN, (L, H, Tw, Sw) for a transformer (L = 1 with `layer`),
        float32 on the CPU.

    Raises:
        ValueError: a model that returns no attention.
    """
    was_training = model.training
    model.eval()
    try:
        # length-sorted batches pad less; each result carries its example index
        order = sorted(
            range(len(examples)), key=lambda i: (len(examples[i][0]), len(examples[i][1]))
        )
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            weights = _batch_attention(model, [examples[i] for i in chunk], chunk, device)
            if shift:
                weights = weights[..., 1:, :]  # row t <- step t + 1: the step whose input is y_t
            if layer is not None and weights.dim() == 5:  # (B, L, H, T, S)
                weights = weights[:, layer - 1 : layer]
            for b, i in enumerate(chunk):
                # rows past the target's pieces (</s>, padding) and padded columns are dropped
                yield i, word_attention(weights[b], *words[i])
    finally:
        model.train(was_training)


def _batch_attention(
    model: Seq2Seq, examples: list[Example], indices: list[int], device: torch.device | str
) -> Tensor:
    """Teacher-forced cross-attention of one batch: (B, T, S) or (B, L, H, T, S), on the CPU."""
    batch = collate(
        examples, indices, pad_id=model.pad_id, bos_id=model.bos_id, eos_id=model.eos_id
    ).to(device)
    # Copy models need the source in the extended vocabulary; it only places the copy mass on
    # output ids, never the attention, so the in-vocabulary ids serve.
    if isinstance(model, TransformerSeq2Seq):
        weights = _transformer_cross_attention(model, batch.src, batch.src_lengths, batch.tgt_in)
    else:
        copy = {"src_ext": batch.src, "n_oov": 0} if getattr(model, "copy", False) else {}
        output = model(batch.src, batch.src_lengths, batch.tgt_in, need_weights=True, **copy)
        if output.attention is None:
            raise ValueError(f"{type(model).__name__} returns no attention weights")
        weights = output.attention
    weights = weights.float().cpu()
    if weights.dim() not in (3, 5):
        raise ValueError(f"unexpected attention shape {tuple(weights.shape)}")
    return weights


def _transformer_cross_attention(
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


def select_map(pooled: Tensor, method: AlignmentMethod) -> Tensor:
    """The (Tw, Sw) map of `method` from one example's word attention: an RNN's (Tw, Sw) as
    it is; from a transformer's (L, H, Tw, Sw) the method's layer, and its head or the mean of
    its heads.

    Raises:
        ValueError: a layer or head outside the model's.
    """
    if pooled.dim() == 2:
        return pooled
    layers, heads = pooled.shape[:2]
    layer = layers if method.layer is None else method.layer
    if not 1 <= layer <= layers:
        raise ValueError(f"layer must be in 1..{layers}, got {layer}")
    if method.head is None:
        return pooled[layer - 1].mean(dim=0)  # (Tw, Sw); pooling is linear, so mean first or last
    if not 1 <= method.head <= heads:
        raise ValueError(f"head must be in 1..{heads}, got {method.head}")
    return pooled[layer - 1, method.head - 1]


# --------------------------------------------------------------------------- sentences in
def check_method(trained: "TrainedModel", method: AlignmentMethod) -> None:
    """UserError unless the method is known and the checkpoint's model has the attention map
    it reads (`--layer`/`--head` within the transformer's, none for an RNN)."""
    model_cfg = trained.cfg.model
    if method.name not in ALIGNMENT_METHODS:
        raise UserError(
            f"--method must be one of {', '.join(ALIGNMENT_METHODS)}, got {method.name!r}"
        )
    if model_cfg.family.value != "transformer":
        if model_cfg.attention.score.value == "none":
            raise UserError("this model has no attention (model.attention.score=none)")
        if method.layer is not None or method.head is not None:
            raise UserError("--layer and --head choose a transformer's map; an RNN has one")
        return
    limits = {
        "--layer": (method.layer, model_cfg.dec_layers),
        "--head": (method.head, model_cfg.heads),
    }
    for option, (value, count) in limits.items():
        if value is not None and not 1 <= value <= count:
            raise UserError(f"{option} must be in 1..{count} for this model, got {value}")


def align_sentences(
    trained: "TrainedModel",
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    method: AlignmentMethod = AlignmentMethod(),
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 64,
) -> ForcedAlignments:
    """Word alignments of (source line, target line) pairs by forced decoding with `method`.

    `trained`: a checkpoint loaded with `attnseq.models.loading.load_trained_model`. Each line
    is a sentence with whitespace-separated words, which the links count (module docstring).

        trained = load_trained_model(Path("best.pt"))
        result = align_sentences(trained, ["a b c"], ["x y z"], AlignmentMethod("shift-att"))
        result.links[0]  # {(0, 0), (2, 1), ...}: (source word, target word)

    Raises:
        UserError: different numbers of lines, no lines, an empty line, a line that does not
            tokenize into its words or is too long for the model, or a method the model lacks.
    """
    check_method(trained, method)
    if len(src_lines) != len(tgt_lines):
        raise UserError(
            f"{len(src_lines)} source lines but {len(tgt_lines)} target lines: they must be "
            "parallel, one sentence pair per line"
        )
    if not src_lines:
        raise UserError("no sentence pairs to align")
    model = trained.model.to(device)
    examples, words = _encode_pairs(trained, src_lines, tgt_lines, position_limit(model))
    soft: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(examples)
    layers = trained.cfg.model.dec_layers if trained.cfg.model.family.value == "transformer" else 0
    layer = (method.layer or layers) if layers else None
    read = AlignmentMethod(method.name, 1, method.head) if layers else method  # of (1, H, ..)
    for i, pooled in forced_word_attention(
        model, examples, words, shift=method.shift, device=device, batch_size=batch_size,
        layer=layer,
    ):  # fmt: skip
        soft[i] = select_map(pooled, read).numpy().copy()  # not a view of all maps
    links = [argmax_alignment(matrix) for matrix in soft]
    return ForcedAlignments(links, soft, method, method.describe(layers))


def _encode_pairs(
    trained: "TrainedModel",
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    max_length: int | None,
) -> tuple[list[Example], list[WordIds]]:
    """(source ids, target ids) and the word ids of their pieces for every pair."""
    src_tok, tgt_tok = trained.tokenizers.src, trained.tokenizers.tgt
    examples: list[Example] = []
    words: list[WordIds] = []
    for number, (src_text, tgt_text) in enumerate(zip(src_lines, tgt_lines, strict=True), 1):
        src = encode_sentence(src_tok, src_text, f"source line {number}", max_length)
        tgt = encode_sentence(tgt_tok, tgt_text, f"target line {number}", max_length)
        examples.append((src.ids, tgt.ids))
        words.append((word_ids(src.pieces, src_tok.kind), word_ids(tgt.pieces, tgt_tok.kind)))
    return examples, words
