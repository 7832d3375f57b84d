"""The extended vocabulary of a copy model (See, Liu & Manning 2017, section 2.2): the target
vocabulary (V ids) plus each example's source words it lacks (ids V + k), so that a
pointer-generator can produce them by copying.

Shapes: S source length, T target length, V target vocabulary size, K = len(oovs).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from attnseq.data.tokenizers import UNK_ID, Tokenizer

Pairs = Sequence[tuple[str, str]]
Example = tuple[list[int], list[int]]


@dataclass(frozen=True)
class ExtendedExample:
    """The copy model's view of one example.

    src_ext: (S,) the extended-vocabulary id of every source position.
    tgt_ext: (T,) the target ids with extended ids for copied out-of-vocabulary words (the loss
        labels); same length as the target ids.
    oovs: the example's out-of-vocabulary source words; id V + k is oovs[k].
    """

    src_ext: list[int]
    tgt_ext: list[int]
    oovs: list[str]


def extend_source(
    src_ids: Sequence[int],
    src_pieces: Sequence[str] | None,
    tgt_tokenizer: Tokenizer,
    joint: bool,
) -> tuple[list[int], list[str]]:
    """(src_ext, oovs) of one source: per position i, with token string p_i and id s_i,

        src_ext_i = s_i                      joint vocabulary and s_i is not <unk>
                  = tgt.piece_to_id(p_i)     otherwise, if the target vocabulary has p_i
                  = V + k                    else: p_i is the example's k-th out-of-vocabulary word

    `oovs` lists those words in order of first occurrence (a word gets one id).

    Args:
        src_ids: the source ids (possibly truncated).
        src_pieces: the token strings of the untruncated source, aligned with its ids; only
            read at positions that need a string (may be None when a joint source has no <unk>).
        tgt_tokenizer: the target side's tokenizer.
        joint: source and target share the tokenizer (ids are target ids already).
    """
    vocab_size = tgt_tokenizer.vocab_size
    src_ext: list[int] = []
    oov_index: dict[str, int] = {}
    for position, token_id in enumerate(src_ids):
        if joint and token_id != UNK_ID:
            src_ext.append(token_id)
            continue
        if src_pieces is None or position >= len(src_pieces):
            raise ValueError(
                f"source position {position} needs its token string, but only "
                f"{0 if src_pieces is None else len(src_pieces)} pieces were given"
            )
        piece = src_pieces[position]
        target_id = tgt_tokenizer.piece_to_id(piece)
        if target_id != UNK_ID:
            src_ext.append(target_id)
        else:
            src_ext.append(vocab_size + oov_index.setdefault(piece, len(oov_index)))
    return src_ext, list(oov_index)


def extend_target(
    tgt_ids: Sequence[int], tgt_pieces: Sequence[str] | None, oovs: Sequence[str], vocab_size: int
) -> list[int]:
    """Target labels: <unk> whose string is the k-th source OOV -> V + k; the rest unchanged.

    `tgt_pieces` are the untruncated target's token strings (only read at <unk> positions).
    """
    if not oovs or UNK_ID not in tgt_ids:
        return list(tgt_ids)
    if tgt_pieces is None:
        raise ValueError("the target has <unk> tokens but no pieces were given")
    oov_index = {word: k for k, word in enumerate(oovs)}
    return [
        vocab_size + oov_index[tgt_pieces[j]]
        if token_id == UNK_ID and tgt_pieces[j] in oov_index
        else token_id
        for j, token_id in enumerate(tgt_ids)
    ]


def _pieces(tokenizer: Tokenizer, texts: list[str]) -> list[list[str]]:
    batch = getattr(tokenizer, "pieces_batch", None)  # sentencepiece: one threaded call
    return batch(texts) if batch is not None else [tokenizer.pieces(text) for text in texts]


def extend_examples(
    pairs: Pairs, examples: Sequence[Example], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> list[ExtendedExample]:
    """`ExtendedExample` of every encoded example (prepare_data's `pairs` and `examples` of a
    split, aligned; the ids may be truncated, the texts are whole)."""
    if len(pairs) != len(examples):
        raise ValueError(f"{len(pairs)} text pairs but {len(examples)} encoded examples")
    joint = src_tokenizer is tgt_tokenizer
    # strings are needed only where an id does not say it all: a joint source's <unk> positions,
    # every position of a separate source, the target's <unk> positions
    need_src = [not joint or UNK_ID in src for src, _ in examples]
    need_tgt = [UNK_ID in tgt for _, tgt in examples]
    src_texts = [src for (src, _), needed in zip(pairs, need_src, strict=True) if needed]
    tgt_texts = [tgt for (_, tgt), needed in zip(pairs, need_tgt, strict=True) if needed]
    src_pieces = iter(_pieces(src_tokenizer, src_texts))
    tgt_pieces = iter(_pieces(tgt_tokenizer, tgt_texts))
    extended = []
    for (src_ids, tgt_ids), src_needed, tgt_needed in zip(
        examples, need_src, need_tgt, strict=True
    ):
        src_ext, oovs = extend_source(
            src_ids, next(src_pieces) if src_needed else None, tgt_tokenizer, joint
        )
        tgt_ext = extend_target(
            tgt_ids, next(tgt_pieces) if tgt_needed else None, oovs, tgt_tokenizer.vocab_size
        )
        extended.append(ExtendedExample(src_ext, tgt_ext, oovs))
    return extended


def extend_text(
    text: str, src_ids: Sequence[int], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer
) -> tuple[list[int], list[str]]:
    """(src_ext, oovs) of a source text encoded (and maybe truncated) to `src_ids`: what
    `attnseq translate` and `visualize-alignment` need for raw input."""
    joint = src_tokenizer is tgt_tokenizer
    pieces = src_tokenizer.pieces(text) if not joint or UNK_ID in src_ids else None
    return extend_source(src_ids, pieces, tgt_tokenizer, joint)


def extended_pieces(tokenizer: Tokenizer, ids: Sequence[int], oovs: Sequence[str]) -> list[str]:
    """`ids_to_pieces` with ids >= V shown as the source words they stand for (heatmap labels)."""
    size = tokenizer.vocab_size
    ids = [int(i) for i in ids]
    if all(token_id < size for token_id in ids):
        return tokenizer.ids_to_pieces(ids)
    pieces = []
    for token_id in ids:
        if size <= token_id < size + len(oovs):
            pieces.append(oovs[token_id - size])
        else:
            pieces.extend(tokenizer.ids_to_pieces([token_id]))  # "<unk>" past the OOVs
    return pieces
