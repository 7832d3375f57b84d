"""`attnseq visualize-alignment`: a trained model's attention maps, from the checkpoint alone:
one teacher-forced pass with weights over the model's greedy output (which equals incremental
decoding) or over a forced target. Map kinds: docs/internals/evaluation.md."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attnseq.alignment.segments import is_hierarchical, join_pieces, segment_labels
from attnseq.alignment.word_links import check_layer_and_head, word_attention
from attnseq.analysis.figures import DEFAULT_STYLE, Style, alignment_figure, attention_grid_figure
from attnseq.data.extended_vocab import extend_target, extend_text, extended_pieces
from attnseq.data.word_alignments import word_ids
from attnseq.decoding import greedy_decode, max_output_lengths
from attnseq.errors import UserError
from attnseq.models.loading import TrainedModel, load_trained_model
from attnseq.models.seq2seq import Seq2Seq, Seq2SeqOutput

KINDS = ("cross", "encoder", "decoder", "segment")


@dataclass
class AttentionMap:
    """weights: (T, S) or (L, H, T, S); row and column labels; p_gen (T,) for copy models;
    the source and output text (the model's own output, or the forced target)."""

    weights: np.ndarray
    rows: list[str]
    columns: list[str]
    row_kind: str  # tokenizer kind of the row tokens (for merge_words)
    column_kind: str
    p_gen: np.ndarray | None = None
    source: str = ""
    output: str = ""

    def title(self) -> str:
        """'source → output', what the map shows."""
        return f"{self.source} → {self.output}"

    def __repr__(self) -> str:
        """One line a notebook can show: the texts cut short, the weights' shape (never the
        values), how many labels each axis has."""
        words = [
            f"source={_cut(self.source)}",
            f"output={_cut(self.output)}",
            f"weights {tuple(self.weights.shape)}",
            f"{len(self.rows)} rows x {len(self.columns)} columns",
        ]
        if self.p_gen is not None:
            words.append(f"p_gen {tuple(self.p_gen.shape)}")
        return f"AttentionMap({', '.join(words)})"


def _cut(text: str, limit: int = 40) -> str:
    """The repr of `text`, cut to `limit` characters with "…" when longer."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


@dataclass
class _Pass:
    """One forward pass of `AlignmentViewer` and the labels of its maps' axes.

    labels: for "source" (the source pieces), "output" (the output pieces + </s>: what
        cross-attention rows predict) and "input" (<s> + the output pieces: the decoder's
        inputs), the pieces and their tokenizer kind.
    """

    output: Seq2SeqOutput
    labels: dict[str, tuple[list[str], str]]
    source: str  # the source text
    text: str  # the output text: the model's own, or the forced target
    target_ids: list[int]  # what each cross-attention row predicts: the output ids and EOS

    def map(
        self, weights: torch.Tensor, rows: str, columns: str, p_gen: np.ndarray | None = None
    ) -> AttentionMap:
        """The map of `weights` (..., rows, columns) with the axes labelled by `labels`."""
        row_pieces, row_kind = self.labels[rows]
        column_pieces, column_kind = self.labels[columns]
        slots = weights.size(-1) - len(column_pieces)  # persistent memory columns come last
        column_pieces = [*column_pieces, *(memory_label(slot) for slot in range(1, slots + 1))]
        return AttentionMap(
            weights.cpu().numpy(),
            row_pieces,
            column_pieces,
            row_kind,
            column_kind,
            p_gen,
            source=self.source,
            output=self.text,
        )


class AlignmentViewer:
    """A loaded checkpoint (a path, or a model `load_trained_model` loaded) that turns
    sentences into attention maps and figures."""

    def __init__(self, checkpoint: Path | TrainedModel, device: str | torch.device = "cpu") -> None:
        trained = (
            load_trained_model(checkpoint) if isinstance(checkpoint, str | Path) else checkpoint
        )
        self.cfg, self.tokenizers = trained.cfg, trained.tokenizers
        self.model: Seq2Seq = trained.model.to(device)
        self.device = torch.device(device)

    def attention(self, src: str, tgt: str | None = None, kind: str = "cross") -> AttentionMap:
        """The `kind` map (one of `KINDS`) of `src` with the model's own greedy output, or with
        `tgt` forced when it is given."""
        self._check_request(src, kind)
        return self._kind_map(self._forward(src, tgt), kind)

    def maps(self, src: str, tgt: str | None = None) -> tuple[dict[str, AttentionMap], np.ndarray]:
        """Every map one forward pass gives (cross; for transformers also encoder and decoder,
        unless a kernel self-attention forms no weights) and the log-probability of each output
        piece and </s>, (T + 1,): log p(y_t | y_<t, x) under teacher forcing."""
        self._check_request(src, "cross")
        run = self._forward(src, tgt)
        kinds = ["cross"]
        if self.cfg.model.family.value == "transformer":
            kinds += [
                kind
                for kind in ("encoder", "decoder")
                if _self_attention(run.output, kind) is not None
            ]
        log_probs = torch.log_softmax(run.output.logits[0].float(), dim=-1)  # (T + 1, V)
        targets = torch.tensor(run.target_ids, device=log_probs.device)  # (T + 1,)
        token_log_probs = log_probs.gather(1, targets.unsqueeze(1))[:, 0].cpu().numpy()
        return {kind: self._kind_map(run, kind) for kind in kinds}, token_log_probs

    def _kind_map(self, run: "_Pass", kind: str) -> AttentionMap:
        """The `kind` map of one forward pass."""
        output = run.output
        if kind == "cross":
            if output.attention is None:
                raise UserError("this model has no attention (model.attention.score=none)")
            p_gen = output.p_gen
            return run.map(
                output.attention[0],  # (T, S) or (L, H, T, S)
                "output",
                "source",
                None if p_gen is None else p_gen[0].cpu().numpy(),
            )
        if kind == "segment":
            assert output.segment_attention is not None
            segments = output.segment_attention.segments[0].tolist()  # (S,)
            source_pieces = run.labels["source"][0]
            labels = segment_labels(source_pieces, segments, self.tokenizers.src.pieces_to_text)
            weights = output.segment_attention.weights[0, :, : len(labels)]  # (T, N)
            run.labels["segment"] = (labels, "word")  # one label per segment
            return run.map(weights, "output", "segment")
        weights = _self_attention(output, kind)
        if weights is None:
            raise UserError(self._no_self_attention_weights(kind))
        side = "source" if kind == "encoder" else "input"
        return run.map(weights[0], side, side)  # (L, H, S, S) or (L, H, T, T)

    def check_kind(self, kind: str, name: str = "kind") -> None:
        """UserError unless `kind` is one of `KINDS` and a map this model has: segment needs a
        hierarchical model, encoder and decoder a transformer. `name`: what the messages call
        the kind (a command passes its option)."""
        if kind not in KINDS:
            raise UserError(f"{name} must be one of {', '.join(KINDS)}, got {kind!r}")
        if kind == "segment" and not is_hierarchical(self.model):
            raise UserError(
                f"{name} segment needs a hierarchical model (model.attention.hierarchy=sentence)"
            )
        if kind in ("encoder", "decoder") and self.cfg.model.family.value != "transformer":
            raise UserError(
                f"{name} {kind} needs a transformer; RNN models have cross-attention only"
            )

    def _check_request(self, src: str, kind: str) -> None:
        self.check_kind(kind)
        if not src.strip():
            raise UserError("empty source sentence: there is nothing to draw")

    def _forward(self, src: str, tgt: str | None) -> "_Pass":
        """One teacher-forced pass with weights over the output (greedy decoding first when
        `tgt` is None) or over the forced target."""
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        src_ids = src_tok.encode(src)[: self.cfg.data.max_src_len]
        if not src_ids:
            raise UserError(f"the source {src!r} has no tokens after tokenization")
        source = torch.tensor([src_ids], device=self.device)  # (1, S)
        lengths = torch.tensor([len(src_ids)], device=self.device)
        copy_inputs: dict = {}
        oovs: list[str] = []
        if self.cfg.model.copy:  # the source in the extended vocabulary
            src_ext, oovs = extend_text(src, src_ids, src_tok, tgt_tok)
            copy_inputs = {
                "src_ext": torch.tensor([src_ext], device=self.device),
                "n_oov": len(oovs),
            }
        with torch.no_grad():
            if tgt is None:
                limit = max_output_lengths(
                    lengths, self.cfg.decoding.max_output_ratio, self.cfg.decoding.max_output_extra
                )
                tgt_ids = greedy_decode(self.model, source, lengths, limit, **copy_inputs)[0].tokens
            else:
                tgt_ids = tgt_tok.encode(tgt)
            tgt_in = torch.tensor([[self.model.bos_id, *tgt_ids]], device=self.device)  # (1, T)
            output = self.model(source, lengths, tgt_in, need_weights=True, **copy_inputs)
        src_pieces = src_tok.ids_to_pieces(src_ids)
        if copy_inputs:  # as the model sees it: unknown pieces are their source text
            src_pieces = extended_pieces(tgt_tok, copy_inputs["src_ext"][0].tolist(), oovs)
        tgt_pieces = extended_pieces(tgt_tok, tgt_ids, oovs)
        target_ids = list(tgt_ids)
        if tgt is not None and self.cfg.model.copy:
            tgt_pieces = tgt_tok.pieces(tgt)  # a forced target's words as written
            # what each step is scored on: a copied source word's extended id, not <unk>
            target_ids = extend_target(tgt_ids, tgt_pieces, oovs, tgt_tok.vocab_size)
        src_kind, tgt_kind = type(src_tok).kind, type(tgt_tok).kind
        return _Pass(
            output=output,
            labels={
                "source": (src_pieces, src_kind),
                "output": ([*tgt_pieces, "</s>"], tgt_kind),
                "input": (["<s>", *tgt_pieces], tgt_kind),
            },
            source=src,
            text=tgt_tok.decode_extended(tgt_ids, oovs) if tgt is None else tgt,
            target_ids=[*target_ids, self.model.eos_id],
        )

    def _no_self_attention_weights(self, kind: str) -> str:
        """Why a transformer returned no self-attention weights: a kernel mechanism
        (model.attention.kind=linear/performer) in the encoder, or in the decoder too."""
        attention_kind = self.cfg.model.attention.kind.value
        return (
            f"cannot draw {kind} self-attention: this model uses model.attention.kind="
            f"{attention_kind}, which computes phi(Q) (phi(K)^T V) from feature maps and never "
            "forms the attention weights, so there is no map to draw; cross-attention stays "
            "full attention and can be drawn (kind cross)"
        )


def _self_attention(output: Seq2SeqOutput, kind: str) -> torch.Tensor | None:
    """The "encoder" or "decoder" self-attention weights of an output (None: not formed)."""
    return output.encoder_self_attention if kind == "encoder" else output.decoder_self_attention


def merge_words(attention: AttentionMap) -> AttentionMap:
    """Pieces -> words: sum the columns of a word's pieces, average the rows
    (alignment/word_links.py `word_attention`)."""
    row_ids = _word_ids(attention.rows, attention.row_kind)
    column_ids = _word_ids(attention.columns, attention.column_kind)
    weights = np.asarray(word_attention(attention.weights, column_ids, row_ids))
    p_gen = None
    if attention.p_gen is not None:  # a word's p_gen: the mean over its pieces, like its row
        p_gen = np.asarray(word_attention(attention.p_gen[:, None], [0], row_ids))[:, 0]
    return AttentionMap(
        weights,
        _words(attention.rows, row_ids),
        _words(attention.columns, column_ids),
        "word",
        "word",
        p_gen,
        attention.source,
        attention.output,
    )


SPECIAL_PIECES = {"<s>", "</s>", "<pad>"}


def memory_label(slot: int) -> str:
    """The column label of persistent memory slot `slot` (1-based): "<m1>", "<m2>", ..."""
    return f"<m{slot}>"


def _is_special(piece: str) -> bool:
    """<s>, </s>, <pad> and memory slots: words of their own, never glued to a neighbour."""
    return piece in SPECIAL_PIECES or (
        piece.startswith("<m") and piece.endswith(">") and piece[2:-1].isdigit()
    )


def _word_ids(pieces: list[str], kind: str) -> list[int]:
    """word_ids, with <s> and </s> kept as words of their own (not glued to a neighbour)."""
    plain_ids = iter(word_ids([p for p in pieces if not _is_special(p)], kind))
    keys = [
        ("special", i) if _is_special(p) else ("word", next(plain_ids))
        for i, p in enumerate(pieces)
    ]
    numbering: dict[tuple[str, int], int] = {}
    ids = []
    for key in keys:
        if key == ("word", -1):
            ids.append(-1)  # whitespace between words (char tokenizer)
            continue
        ids.append(numbering.setdefault(key, len(numbering)))
    return ids


def _words(pieces: list[str], ids: list[int]) -> list[str]:
    count = max(ids, default=-1) + 1
    words = [""] * count
    for piece, index in zip(pieces, ids, strict=False):
        if index >= 0:
            words[index] += piece.replace("▁", "")
    return words[:count]


def draw(
    attention: AttentionMap,
    *,
    layer: int | None = None,
    head: int | None = None,
    all_heads: bool = False,
    title: str | None = None,
    style: Style = DEFAULT_STYLE,
    names: tuple[str, str] = ("layer", "head"),
):
    """A figure for one map: RNN map as is; transformer: one head, the head mean, or the grid.

    layer/head are 1-based; layer defaults to the last, head to the mean over heads. The title
    defaults to the map's "source → output". `names`: what a message calls the layer and head
    (a command passes its options).
    """
    weights, p_gen = attention.weights, attention.p_gen
    title = title or attention.title()
    if weights.ndim == 2:
        check_layer_and_head(layer, head, 1, 1, "its attention here is one map", names)
        return alignment_figure(weights, attention.columns, attention.rows, title, p_gen, style)
    layers, heads = weights.shape[:2]
    check_layer_and_head(layer, head, layers, heads, "", names)
    if all_heads:
        return attention_grid_figure(weights, attention.columns, attention.rows, title, style)
    layer = layers if layer is None else layer
    chosen = weights[layer - 1]
    if head is None:
        label = f"layer {layer}, mean of {heads} heads"
        matrix = chosen.mean(axis=0)
    else:
        label, matrix = f"layer {layer}, head {head}", chosen[head - 1]
    return alignment_figure(
        matrix, attention.columns, attention.rows, f"{title} ({label})", p_gen, style
    )


def saved_attention_map(
    path: Path, index: int, kind: str = "cross", index_name: str = "index"
) -> tuple[AttentionMap, str]:
    """Example `index` of a file of `attnseq eval --save-attention` as a cross-attention map
    (rows: output tokens + </s>, columns: source tokens) and a title naming it; kind="segment":
    a hierarchical model's segment attention (columns: the segments). `index_name`: what a
    message calls the index (a command passes its option).

    An RNN's (1, 1, T, S) weights come back as (T, S), a transformer's as (L, H, T, S).

    Raises:
        UserError: a missing or malformed file, or an index out of range.
    """
    from attnseq.alignment.saved_attention import SavedAttention

    with SavedAttention(path) as saved:
        example = saved.example(index, index_name)
        family = saved.family
        src_kind, tgt_kind = str(saved.meta["src_kind"]), str(saved.meta["tgt_kind"])
        split = str(saved.meta["split"])
    weights = example.weights
    if 0 in weights.shape[-2:]:
        empty = "source" if weights.shape[-1] == 0 else "output"
        raise UserError(f"example {index} of {path} has no attention to draw: its {empty} is empty")
    if family != "transformer" and weights.shape[:2] == (1, 1):
        weights = weights[0, 0]  # (T, S)
    columns, column_kind = example.src_tokens, src_kind
    if kind == "segment":
        if example.segments is None or example.segment_weights is None:
            raise UserError(f"{path} holds no segment attention (not a hierarchical model)")
        weights, column_kind = example.segment_weights, "word"  # one label per segment
        columns = segment_labels(
            example.src_tokens, example.segments, lambda pieces: join_pieces(pieces, src_kind)
        )
    attention = AttentionMap(
        weights,
        example.hyp_tokens,
        columns,
        tgt_kind,
        column_kind,
        source=example.src_text,
        output=example.hyp_text,
    )
    return attention, f"{split} example {index}: {attention.title()}"
