"""Word alignments of given sentence pairs by forced decoding: the target is teacher-forced
through a trained model and its cross-attention (or another attribution, attribution.py) is
pooled to words and read as one link per target word; the one path of `attnseq align`, and of
the AER of `attnseq eval --gold` and of validation.

Shapes: B batch, T target pieces (+1: the </s> row), S source pieces, L layers, H heads, Tw/Sw
target/source words.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from attnseq.alignment.attribution import (
    ATTRIBUTION_METHODS,
    GRADIENT_METHODS,
    GradientSettings,
    attribute_examples,
    canonical_method,
    check_method_fits,
    choose_map,
    copy_view,
    length_sorted_batches,
    teacher_forced_attention,
)
from attnseq.alignment.word_links import (
    ALIGNMENT_SCORES,
    alignment_error_rate,
    argmax_alignment,
    word_attention,
)
from attnseq.data.batching import Example
from attnseq.data.tokenizers import Tokenizer
from attnseq.data.word_alignments import (
    ALIGNMENT_ORDERS,
    Alignment,
    Link,
    read_gold_links,
    read_parallel_lines,
    read_text_lines,
    word_ids,
)
from attnseq.errors import UserError
from attnseq.models.positional import position_limit
from attnseq.models.seq2seq import Seq2Seq

if TYPE_CHECKING:
    from attnseq.models.loading import TrainedModel

# every attribution method aligns (attribution.py); "saliency" is SmoothGrad's alias
ALIGNMENT_METHODS: tuple[str, ...] = ATTRIBUTION_METHODS
# the AER of eval --gold and of validation reads the attention the forward pass returns
GOLD_METHODS: tuple[str, ...] = ("attention", "shift-att")
WordIds = tuple[list[int], list[int]]  # (source word of each source piece, same for target)


@dataclass(frozen=True)
class AlignmentMethod:
    """How a model's pairs become word links: `name` one of `ALIGNMENT_METHODS` (attribution.py
    says what each reads); for the attention methods of transformers `layer` and `head`
    1-based, None for the last layer and the mean of its heads; `settings` those of the
    gradient methods; `names` what messages call the method, the layer and the head (the
    API's arguments, or a command's options)."""

    name: str = "attention"
    layer: int | None = None
    head: int | None = None
    settings: GradientSettings = GradientSettings()
    names: tuple[str, str, str] = ("method", "layer", "head")

    @property
    def shift(self) -> bool:
        """True when target piece t is read from the row of step t + 1, the step whose input it
        is (Shift-Att: Chen, Sun, Li & Liu 2020, "Accurate Word Alignment Induction from Neural
        Machine Translation", EMNLP, section 3.1), A[t, s] = α[t + 1, s]."""
        return self.name == "shift-att"

    def describe(self, layers: int = 0) -> str:
        """E.g. "shift-att, layer 3, head mean"; `layers`: the model's, 0 for an RNN."""
        if not layers or self.name in (*GRADIENT_METHODS, "saliency"):
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


REPR_LINKS = 8  # the links of the first pair that a ForcedAlignments' repr lists


@dataclass
class ForcedAlignments:
    """What `align_sentences` returns for N pairs.

    links: per pair, the (source word, target word) links, 0-based.
    soft: per pair, the (Tw, Sw) float32 word-level matrix the links were read from (row a: how
        target word a's attention spreads over the source words).
    method: the method, with its description for this model in `label`.
    source_words, target_words: per pair, the whitespace-separated words the links count
        (the labels of `soft[i]`'s columns and rows).
    """

    links: list[Alignment]
    soft: list[np.ndarray]
    method: AlignmentMethod
    label: str = field(default="")
    source_words: list[list[str]] = field(default_factory=list)
    target_words: list[list[str]] = field(default_factory=list)

    def __repr__(self) -> str:
        """One line, e.g. "ForcedAlignments(2 pairs, method='shift-att, layer 2, head mean',
        links[0]=[(0, 0), (1, 2), (2, 1)], soft[0] 3x3)": the first pair's links (at most
        `REPR_LINKS` of them), the shape of its matrix, never the matrices themselves."""
        method = self.label or self.method.name
        pairs = f"{len(self.links)} pair{'' if len(self.links) == 1 else 's'}"
        if not self.links:
            return f"ForcedAlignments({pairs}, method={method!r})"
        first = sorted(self.links[0])
        shown = ", ".join(str(tuple(link)) for link in first[:REPR_LINKS])
        if len(first) > REPR_LINKS:
            shown += f", ... {len(first)} links"
        rows, columns = self.soft[0].shape
        return (
            f"ForcedAlignments({pairs}, method={method!r}, links[0]=[{shown}], "
            f"soft[0] {rows}x{columns})"
        )


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
        for chunk, batch in length_sorted_batches(model, examples, batch_size, device):
            weights = teacher_forced_attention(model, batch)  # (B, [L, H,] T + 1, S)
            if shift:
                weights = weights[..., 1:, :]  # row t <- step t + 1: the step whose input is y_t
            if layer is not None and weights.dim() == 5:  # (B, L, H, T, S)
                weights = weights[:, layer - 1 : layer]
            for b, i in enumerate(chunk):
                # rows past the target's pieces (</s>, padding) and padded columns are dropped
                yield i, word_attention(weights[b], *words[i])
    finally:
        model.train(was_training)


def select_map(pooled: Tensor, method: AlignmentMethod) -> Tensor:
    """The (Tw, Sw) map of `method` from one example's word attention: an RNN's (Tw, Sw) as
    it is; from a transformer's (L, H, Tw, Sw) the method's layer, and its head or the mean of
    its heads.

    Raises:
        ValueError: a layer or head outside the model's.
    """
    return choose_map(pooled, method.layer, method.head)


# --------------------------------------------------------------------------- sentences in
def check_method(trained: "TrainedModel", method: AlignmentMethod) -> None:
    """UserError unless the method is known and fits the checkpoint's model
    (`attribution.check_method_fits`: layer and head within the transformer's and only for
    attention methods, rollout only for transformers, attention only where there is some)."""
    name = canonical_method(method.name, method.names[0])
    check_method_fits(trained, name, method.layer, method.head, method.names)


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
    is a sentence with whitespace-separated words, which the links count.

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
    layers = trained.cfg.model.dec_layers if trained.cfg.model.family.value == "transformer" else 0
    if method.name in ("attention", "shift-att"):
        soft = _attention_soft(model, examples, words, method, layers, device, batch_size)
    else:  # rollout and the gradient methods: piece maps (T + 1, S), pooled the same way
        pairs = list(zip(src_lines, tgt_lines, strict=True))
        maps = attribute_examples(
            model,
            examples,
            canonical_method(method.name),
            layer=method.layer,
            head=method.head,
            batch_size=batch_size,
            settings=method.settings,
            device=device,
            extended=copy_view(trained, pairs, examples),
        )
        soft = [
            word_attention(source, *pair_words).numpy()
            for (source, _, _), pair_words in zip(maps, words, strict=True)
        ]
    links = [argmax_alignment(matrix) for matrix in soft]
    words = [line.split() for line in src_lines], [line.split() for line in tgt_lines]
    return ForcedAlignments(links, soft, method, method.describe(layers), *words)


def _attention_soft(
    model: Seq2Seq,
    examples: Sequence[Example],
    words: Sequence[WordIds],
    method: AlignmentMethod,
    layers: int,
    device: torch.device | str,
    batch_size: int,
) -> list[np.ndarray]:
    """The (Tw, Sw) attention or Shift-Att word maps of the examples, reading only the
    chosen layer of a transformer (`layers` > 0)."""
    soft: list[np.ndarray] = [np.zeros((0, 0), np.float32)] * len(examples)
    layer = (method.layer or layers) if layers else None
    read = replace(method, layer=1) if layers else method  # of (1, H, ..)
    for i, pooled in forced_word_attention(
        model,
        examples,
        words,
        shift=method.shift,
        device=device,
        batch_size=batch_size,
        layer=layer,
    ):
        soft[i] = select_map(pooled, read).numpy().copy()  # not a view of all maps
    return soft


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


# -------------------------------------------------------------- the AER of a model's attention
@dataclass
class AlignmentCorpus:
    """Sentence pairs encoded for one model, with their gold links.

    examples: (source ids, target ids) without BOS/EOS (`attnseq.data.batching.encode_pairs`).
    src_pieces, tgt_pieces: the pieces of each text (`Tokenizer.pieces`), one per id.
    sure, possible: gold links of each example (possible None: every link sure).
    src_kind, tgt_kind: piece kinds for `word_ids` ("word", "char", "sentencepiece").
    src_first: the gold links are (source word, target word) if True, else (target, source);
        the hypothesis links are produced in the same order.
    """

    examples: Sequence[Example]
    src_pieces: Sequence[Sequence[str]]
    tgt_pieces: Sequence[Sequence[str]]
    sure: Sequence[set[Link]]
    possible: Sequence[set[Link]] | None
    src_kind: str
    tgt_kind: str
    src_first: bool = True


@torch.no_grad()
def model_alignment_metrics(
    model: Seq2Seq,
    examples: Sequence[Example],
    src_pieces: Sequence[Sequence[str]],
    tgt_pieces: Sequence[Sequence[str]],
    gold_sure: Sequence[Iterable[Link]],
    gold_possible: Sequence[Iterable[Link]] | None = None,
    *,
    src_kind: str,
    tgt_kind: str,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    src_first: bool = True,
    per_map_scores: Sequence[str] = ("aer",),
) -> dict[str, float]:
    """`corpus_alignment_metrics` of the corpus these arguments form (`AlignmentCorpus` says
    what each is); the gold links are read into sets once, since they are checked and scored."""
    sure = [set(links) for links in gold_sure]
    possible = None if gold_possible is None else [set(links) for links in gold_possible]
    corpus = AlignmentCorpus(
        examples, src_pieces, tgt_pieces, sure, possible, src_kind, tgt_kind, src_first
    )
    return corpus_alignment_metrics(
        model, corpus, device=device, batch_size=batch_size, per_map_scores=per_map_scores
    )


@torch.no_grad()
def corpus_alignment_metrics(
    model: Seq2Seq,
    corpus: AlignmentCorpus,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 32,
    per_map_scores: Sequence[str] = ("aer",),
    shift: bool = False,
) -> dict[str, float]:
    """AER of a model's cross-attention, teacher-forced on the corpus's (source, reference
    target) pairs. The overall numbers are those of a transformer's last layer's head mean, a
    choice fixed in advance: choosing the map by its AER would tune on the gold links.

    Args:
        model: any `Seq2Seq`; put in eval mode for the pass (its mode is restored after).
        corpus: the encoded pairs and their gold links.
        device: where to run the model.
        batch_size: examples per forward pass.
        per_map_scores: which of "aer", "precision", "recall" to report per layer/head
            (``{score}/layer{L}/head{H}`` and ``{score}/layer{L}/mean``).
        shift: read each target word from the step whose input it is (Shift-Att) instead of
            the step that predicts it.

    Returns:
        {"aer", "precision", "recall"} and, for transformers, the per-layer/head scores: all
        of the first score, then of the next (by default the AERs only).

    Raises:
        ValueError: mismatched lengths, a model without attention, or gold links outside the
            words the pieces make up.
    """
    _check_arguments(corpus, batch_size, per_map_scores)
    words = _example_words(corpus)
    hyps, last_layer = _hypothesis_links(model, corpus, words, device, batch_size, shift)
    return _scores(hyps, corpus, last_layer, per_map_scores)


# ------------------------------------------------------------------------------- checks
def _check_arguments(
    corpus: AlignmentCorpus, batch_size: int, per_map_scores: Sequence[str]
) -> None:
    n = len(corpus.examples)
    lists: dict[str, Sequence[object]] = {
        "src_pieces": corpus.src_pieces,
        "tgt_pieces": corpus.tgt_pieces,
        "gold_sure": corpus.sure,
    }
    if corpus.possible is not None:
        lists["gold_possible"] = corpus.possible
    for name, values in lists.items():
        if len(values) != n:
            raise ValueError(f"{n} examples but {len(values)} {name}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    unknown = [name for name in per_map_scores if name not in ALIGNMENT_SCORES]
    if unknown:
        raise ValueError(f"unknown scores {unknown}; valid: {', '.join(ALIGNMENT_SCORES)}")


def _example_words(corpus: AlignmentCorpus) -> list[WordIds]:
    """The word ids of every example's pieces, once its pieces match its ids and its gold
    links fall inside its words."""
    words: list[WordIds] = []
    for i, ((src_ids, tgt_ids), src_p, tgt_p) in enumerate(
        zip(corpus.examples, corpus.src_pieces, corpus.tgt_pieces, strict=True)
    ):
        if len(src_p) != len(src_ids) or len(tgt_p) != len(tgt_ids):
            raise ValueError(
                f"example {i}: {len(src_ids)}/{len(tgt_ids)} source/target ids but "
                f"{len(src_p)}/{len(tgt_p)} pieces"
            )
        src_words, tgt_words = word_ids(src_p, corpus.src_kind), word_ids(tgt_p, corpus.tgt_kind)
        n_src, n_tgt = max(src_words, default=-1) + 1, max(tgt_words, default=-1) + 1
        _check_gold(corpus.sure[i], n_src, n_tgt, i, corpus.src_first, "sure")
        if corpus.possible is not None:
            _check_gold(corpus.possible[i], n_src, n_tgt, i, corpus.src_first, "possible")
        words.append((src_words, tgt_words))
    return words


def _check_gold(
    links: Iterable[Link], n_src: int, n_tgt: int, index: int, src_first: bool, name: str
) -> None:
    for link in links:
        s, t = link if src_first else link[::-1]
        if not (0 <= s < n_src and 0 <= t < n_tgt):
            raise ValueError(
                f"{name} link {link} of example {index} is outside its {n_src} source x "
                f"{n_tgt} target words: do the pieces split into the gold's words, and is "
                f"src_first={src_first} the gold's order?"
            )


# --------------------------------------------------------------------------- the model pass
def _hypothesis_links(
    model: Seq2Seq,
    corpus: AlignmentCorpus,
    words: Sequence[WordIds],
    device: torch.device | str,
    batch_size: int,
    shift: bool,
) -> tuple[dict[str, list[Alignment]], int]:
    """Argmax links of every example for every attention map ("" for an RNN's single map), in
    example order, and the transformer's number of layers (0 for an RNN)."""
    n = len(corpus.examples)
    hyps: dict[str, list[Alignment]] = {}
    last_layer = 0
    for i, pooled in forced_word_attention(
        model, corpus.examples, words, shift=shift, device=device, batch_size=batch_size
    ):
        if pooled.dim() == 4:  # (L, H, Tw, Sw)
            last_layer = pooled.shape[0]
        for key, method in _maps(pooled):
            links = argmax_alignment(select_map(pooled, method), src_first=corpus.src_first)
            hyps.setdefault(key, [set() for _ in range(n)])[i] = links
    return hyps, last_layer


def _maps(pooled: Tensor) -> list[tuple[str, AlignmentMethod]]:
    """(map name, method) of every map of one example's word attention: "" for an RNN's
    (Tw, Sw); for a transformer's (L, H, Tw, Sw) every head, then its layer's head mean."""
    if pooled.dim() == 2:
        return [("", AlignmentMethod())]
    L, H = pooled.shape[:2]
    maps: list[tuple[str, AlignmentMethod]] = []
    for layer in range(1, L + 1):
        for head in range(1, H + 1):
            maps.append((f"layer{layer}/head{head}", AlignmentMethod(layer=layer, head=head)))
        maps.append((f"layer{layer}/mean", AlignmentMethod(layer=layer)))
    return maps


# -------------------------------------------------------------------------------- scores
def _scores(
    hyps: dict[str, list[Alignment]],
    corpus: AlignmentCorpus,
    last_layer: int,
    per_map_scores: Sequence[str],
) -> dict[str, float]:
    """The overall scores first, then per layer/head in layer order (TensorBoard lists by
    name)."""
    if not hyps:  # no examples: nothing hypothesised, nothing to find
        hyps = {"": []}
    metrics: dict[str, float] = {}
    per_map: dict[str, dict[str, float]] = {name: {} for name in per_map_scores}
    for key, links in hyps.items():
        scores = alignment_error_rate(links, corpus.sure, corpus.possible)
        if key:
            for name in per_map_scores:
                per_map[name][f"{name}/{key}"] = scores[name]
        if key == "" or key == f"layer{last_layer}/mean":
            metrics.update({name: scores[name] for name in ALIGNMENT_SCORES})
    for values in per_map.values():
        metrics.update(values)
    return metrics


def alignment_table(metrics: Mapping[str, float]) -> str:
    """A text table of `model_alignment_metrics(..., per_map_scores=ALIGNMENT_SCORES)`: one
    line per layer/head (and each layer's head average), then the overall scores."""
    header = f"{'attention':<22}{'AER':>8}{'precision':>11}{'recall':>8}"
    lines = [header, "-" * len(header)]
    maps = [key[len("aer/") :] for key in metrics if key.startswith("aer/")]
    for key in maps:
        layer, head = key.split("/")
        label = f"{layer[:5]} {layer[5:]}, " + (
            "head mean" if head == "mean" else f"head {head[4:]}"
        )
        values = [metrics.get(f"{name}/{key}", float("nan")) for name in ALIGNMENT_SCORES]
        lines.append(f"{label:<22}{values[0]:>8.4f}{values[1]:>11.4f}{values[2]:>8.4f}")
    overall = "overall" if not maps else f"overall (layer {maps[-1].split('/')[0][5:]} mean)"
    values = [metrics[name] for name in ALIGNMENT_SCORES]
    lines.append(f"{overall:<22}{values[0]:>8.4f}{values[1]:>11.4f}{values[2]:>8.4f}")
    return "\n".join(lines)


# ------------------------------------------------------------------- gold sets of attnseq eval
@dataclass
class GoldAlignmentFiles:
    """A word-alignment test set given on the command line (`attnseq eval --gold`).

    gold: links, Pharaoh (``i-j`` sure, ``i?j`` possible, 0-based, one line per sentence) or
        NAACL 2003 (``sentence_no i j [S|P]``, 1-based, one link per line).
    src, tgt: the sentence pairs, one per line, words separated by whitespace (the words the
        gold indices count).
    possible: Pharaoh only, a second file whose links are all possible (WPT's
        ``test.possible.pharaoh`` next to ``test.sure.pharaoh``).
    gold_format: "auto" (from the content), "pharaoh" or "naacl".
    method: how a target word's row is read, "attention" (the step that predicts the word) or
        "shift-att" (the step whose input it is).
    order: "src-tgt" if a link is (source word, target word), "tgt-src" if (target, source):
        WPT's links are (English, French), so "src-tgt" for an en->fr model, "tgt-src" for fr->en.
    names: what messages call each field (a command passes its options); a field not named
        here is called by its own name.
    """

    gold: Path
    src: Path
    tgt: Path
    possible: Path | None = None
    gold_format: str = "auto"
    order: str = "src-tgt"
    method: str = "attention"
    names: Mapping[str, str] = field(default_factory=dict)

    def name(self, field_name: str) -> str:
        """What messages call the field `field_name`."""
        return self.names.get(field_name, field_name)


@dataclass
class LoadedAlignmentSet(AlignmentCorpus):
    """`GoldAlignmentFiles` read and encoded for one model's tokenizers."""

    def score(
        self,
        model: Seq2Seq,
        device: torch.device | str = "cpu",
        batch_size: int = 32,
        method: str = "attention",
    ) -> dict[str, float]:
        """AER, precision and recall of the model's teacher-forced attention, overall (the
        last layer's head average for transformers) and per layer/head
        (`corpus_alignment_metrics`); `method` as `GoldAlignmentFiles`."""
        try:
            return corpus_alignment_metrics(
                model,
                self,
                device=device,
                batch_size=batch_size,
                per_map_scores=ALIGNMENT_SCORES,
                shift=method == "shift-att",
            )
        except ValueError as error:  # e.g. a model without attention (score=none)
            raise UserError(f"cannot score the gold alignments: {error}") from None


def load_alignment_set(
    files: GoldAlignmentFiles,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    max_length: int | None = None,
) -> LoadedAlignmentSet:
    """Read, check and encode a gold alignment set.

    Each sentence is encoded whole (no truncation). `max_length`: the longest sequence the model
    can take (learned positions).
    """
    for key, value, valid in (
        ("method", files.method, GOLD_METHODS),
        ("order", files.order, ALIGNMENT_ORDERS),
    ):
        if value not in valid:
            raise UserError(f"{files.name(key)} must be one of {', '.join(valid)}, got {value!r}")
    src_lines, tgt_lines = _read_sentences(files)
    examples, src_pieces, tgt_pieces = [], [], []
    for number, (src_text, tgt_text) in enumerate(zip(src_lines, tgt_lines, strict=True)):
        where = f"line {number + 1}"
        src = encode_sentence(src_tokenizer, src_text, f"{files.src} {where}", max_length)
        tgt = encode_sentence(tgt_tokenizer, tgt_text, f"{files.tgt} {where}", max_length)
        examples.append((src.ids, tgt.ids))
        src_pieces.append(src.pieces)
        tgt_pieces.append(tgt.pieces)
    sure, possible = _read_links(files, src_lines, tgt_lines)
    return LoadedAlignmentSet(
        examples,
        src_pieces,
        tgt_pieces,
        sure,
        possible,
        src_kind=type(src_tokenizer).kind,
        tgt_kind=type(tgt_tokenizer).kind,
        src_first=files.order == "src-tgt",
    )


def _read_sentences(files: GoldAlignmentFiles) -> tuple[list[str], list[str]]:
    """The parallel sentence lines, after checking that every given file exists and is UTF-8."""
    src_lines, tgt_lines = read_parallel_lines(
        (files.name("src"), files.src), (files.name("tgt"), files.tgt)
    )
    for key, path in (("gold", files.gold), ("possible", files.possible)):
        if path is not None:
            read_text_lines(path, files.name(key))  # exists, is UTF-8
    return src_lines, tgt_lines


def _read_links(
    files: GoldAlignmentFiles, src_lines: list[str], tgt_lines: list[str]
) -> tuple[list[Alignment], list[Alignment]]:
    """The sure and possible links of the set (`read_gold_links`)."""
    return read_gold_links(
        files.gold,
        files.possible,
        files.gold_format,
        files.order,
        src_lines,
        tgt_lines,
        what=f"gold alignments {files.gold}",
        order_option=files.name("order"),
        files_hint=f", and are {files.name('src')}/{files.name('tgt')} the right files",
    )
