"""The saved cross-attention of decoded hypotheses: the attention.npz of `attnseq eval
--save-attention` (format version 1: docs/internals/alignment.md), written by `save_attention`
and opened by `SavedAttention`, which checks a file's .npy headers before reading any array.
"""

import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnseq.data.extended_vocab import ExtendedExample, extended_pieces
from attnseq.errors import UserError
from attnseq.io.atomic import atomic_write

FORMAT = "attnseq-attention"
VERSION = 1
EOS_PIECE = "</s>"
SCALAR_KEYS = (
    "format",
    "version",
    "split",
    "family",
    "beam",
    "length_penalty",
    "layers",
    "heads",
    "src_kind",
    "tgt_kind",
    "count",
)
ARRAY_KEYS = (
    "src_tokens",
    "src_ids",
    "src_offsets",
    "hyp_tokens",
    "hyp_ids",
    "hyp_offsets",
    "src_text",
    "hyp_text",
    "ref_text",
    "score",
)


def weights_key(index: int) -> str:
    """The archive key of example `index`'s weights: weights_000017."""
    return f"weights_{index:06d}"


def segments_key(index: int) -> str:
    """The archive key of example `index`'s segment ids (hierarchical models)."""
    return f"segments_{index:06d}"


def segment_weights_key(index: int) -> str:
    """The archive key of example `index`'s segment attention (hierarchical models)."""
    return f"segment_weights_{index:06d}"


@dataclass
class AttentionRecord:
    """One decoded example, as `save_attention` stores it.

    weights: (L, H, T, S) float cross-attention (use weights[None, None] for an RNN's (T, S)).
    src_tokens, src_ids: the S source pieces and ids.
    hyp_tokens, hyp_ids: the T pieces and ids of the rows (output tokens, then "</s>" and the
        EOS id when the hypothesis ended with EOS).
    segments, segment_weights: hierarchical models: the (S,) segment ids and the (T, N)
        segment attention; None otherwise.
    """

    weights: np.ndarray
    src_tokens: list[str]
    src_ids: list[int]
    hyp_tokens: list[str]
    hyp_ids: list[int]
    src_text: str
    hyp_text: str
    ref_text: str
    score: float
    segments: list[int] | None = field(default=None, kw_only=True)
    segment_weights: np.ndarray | None = field(default=None, kw_only=True)


def records_from_hypotheses(
    hypotheses: Sequence[Any],
    examples: Sequence[tuple[list[int], list[int]]],
    pairs: Sequence[tuple[str, str]],
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    eos_id: int,
    extended: Sequence[ExtendedExample] | None = None,
    segment_maps: Sequence[tuple[list[int], np.ndarray]] | None = None,
) -> list[AttentionRecord]:
    """Records of decoded hypotheses (`attnseq.decoding.Hypothesis`, decoded with
    need_weights=True), with the source ids of `examples` and the texts of `pairs`.

    `extended`: copy models: each example's extended-vocabulary view
    (attnseq/data/extended_vocab.py); source pieces the vocabulary lacks and output ids >= V are
    then saved as the source words they stand for. `segment_maps`: hierarchical models: each
    example's segment ids (S,) and segment attention (T, N) (alignment/segments.py).

    Raises:
        UserError: a hypothesis carries no attention (a model built without attention).
    """
    lead = _leading_dims(hypotheses)
    records = []
    for index, (hypothesis, (src_ids, _), (src_text, ref_text)) in enumerate(
        zip(hypotheses, examples, pairs, strict=True)
    ):
        weights = _weights(hypothesis, lead, len(src_ids))
        words = [] if extended is None else extended[index].oovs
        src_tokens = (
            src_tokenizer.ids_to_pieces(src_ids)
            if extended is None
            else extended_pieces(tgt_tokenizer, extended[index].src_ext, words)
        )
        pieces = extended_pieces(tgt_tokenizer, hypothesis.tokens, words)
        tokens, ids = _rows(index, weights.shape[-2], pieces, list(hypothesis.tokens), eos_id)
        records.append(
            AttentionRecord(
                weights=weights.astype(np.float32, copy=False),
                src_tokens=src_tokens,
                src_ids=list(src_ids),
                hyp_tokens=tokens,
                hyp_ids=ids,
                src_text=src_text,
                hyp_text=tgt_tokenizer.decode_extended(hypothesis.tokens, words),
                ref_text=ref_text,
                score=float(hypothesis.score),
            )
        )
        if segment_maps is not None:
            records[-1].segments = list(segment_maps[index][0])
            records[-1].segment_weights = segment_maps[index][1].astype(np.float32, copy=False)
    return records


def _leading_dims(hypotheses: Sequence[Any]) -> tuple[int, ...]:
    """(L, H) of the hypotheses' weights ((1, 1) for an RNN's (T, S)); UserError when the model
    returned none."""
    shapes = [tuple(h.attention.shape) for h in hypotheses if h.attention is not None]
    # a hypothesis without weights is only acceptable as beam search's empty "no output
    # possible" entry (score -inf); anything else means the model has no attention
    if any(h.attention is None and (h.tokens or h.score != float("-inf")) for h in hypotheses) or (
        hypotheses and not shapes
    ):
        raise UserError(
            "cannot save attention: this model returns no attention weights "
            "(model.attention.score=none has nothing to save)"
        )
    return shapes[0][:-2] if shapes and len(shapes[0]) == 4 else (1, 1)


def _weights(hypothesis: Any, lead: tuple[int, ...], n_src: int) -> np.ndarray:
    """The hypothesis's cross-attention as (L, H, T, S)."""
    if hypothesis.attention is None:  # no output at all: zero rows
        return np.zeros((*lead, 0, n_src), dtype=np.float32)
    weights = hypothesis.attention.detach().float().cpu().numpy()
    return weights[None, None] if weights.ndim == 2 else weights  # RNN: (T, S) -> (1, 1, T, S)


def _rows(
    index: int, rows: int, pieces: list[str], ids: list[int], eos_id: int
) -> tuple[list[str], list[int]]:
    """The pieces and ids of the attention rows: the output's, then EOS when the last row
    produced it."""
    if rows == len(ids) + 1:  # the last row produced EOS
        return [*pieces, EOS_PIECE], [*ids, eos_id]
    if rows == len(ids):  # stopped at the length limit
        return pieces, ids
    raise ValueError(f"example {index}: {rows} attention rows for {len(ids)} tokens")


def _strings(values: Sequence[str]) -> np.ndarray:
    # a fixed-width unicode array (never dtype=object, which would need pickle)
    return np.array(list(values), dtype=np.str_) if values else np.zeros(0, dtype="<U1")


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64)


def save_attention(
    path: str | Path,
    records: Sequence[AttentionRecord],
    *,
    split: str,
    family: str,
    beam: int,
    length_penalty: float,
    src_kind: str,
    tgt_kind: str,
) -> Path:
    """Write `records` to `path` (.npz, compressed) atomically; returns the path.

    Raises:
        ValueError: weights that are not 4-D, differ in (L, H) between examples, or do not
            match their token lists.
    """
    path = Path(path)
    shapes = {tuple(np.shape(r.weights)[:2]) for r in records}
    if any(np.ndim(r.weights) != 4 for r in records) or len(shapes) > 1:
        raise ValueError(f"weights must all be (L, H, T, S) with one (L, H); got {shapes}")
    layers, heads = shapes.pop() if shapes else (1, 1)
    arrays: dict[str, Any] = {
        "format": np.array(FORMAT),
        "version": np.array(VERSION, dtype=np.int64),
        "split": np.array(split),
        "family": np.array(family),
        "beam": np.array(beam, dtype=np.int64),
        "length_penalty": np.array(length_penalty, dtype=np.float64),
        "layers": np.array(layers, dtype=np.int64),
        "heads": np.array(heads, dtype=np.int64),
        "src_kind": np.array(src_kind),
        "tgt_kind": np.array(tgt_kind),
        "count": np.array(len(records), dtype=np.int64),
        "src_tokens": _strings([t for r in records for t in r.src_tokens]),
        "src_ids": np.array([i for r in records for i in r.src_ids], dtype=np.int64),
        "src_offsets": _offsets([len(r.src_tokens) for r in records]),
        "hyp_tokens": _strings([t for r in records for t in r.hyp_tokens]),
        "hyp_ids": np.array([i for r in records for i in r.hyp_ids], dtype=np.int64),
        "hyp_offsets": _offsets([len(r.hyp_tokens) for r in records]),
        "src_text": _strings([r.src_text for r in records]),
        "hyp_text": _strings([r.hyp_text for r in records]),
        "ref_text": _strings([r.ref_text for r in records]),
        "score": np.array([r.score for r in records], dtype=np.float64),
    }
    for index, record in enumerate(records):
        weights = np.asarray(record.weights, dtype=np.float32)
        expected = (layers, heads, len(record.hyp_tokens), len(record.src_tokens))
        if weights.shape != expected or len(record.src_ids) != expected[3]:
            raise ValueError(
                f"example {index}: weights of shape {weights.shape} but {len(record.hyp_tokens)} "
                f"rows and {len(record.src_tokens)} source tokens"
            )
        if len(record.hyp_ids) != expected[2]:
            raise ValueError(f"example {index}: {len(record.hyp_ids)} ids for {expected[2]} rows")
        arrays[weights_key(index)] = weights
        if record.segments is not None and record.segment_weights is not None:
            arrays[segments_key(index)] = np.asarray(record.segments, dtype=np.int64)
            arrays[segment_weights_key(index)] = np.asarray(
                record.segment_weights, dtype=np.float32
            )
    atomic_write(path, lambda handle: np.savez_compressed(handle, **arrays))
    return path


# ------------------------------------------------------------------------------------- reading
@dataclass
class SavedExample(AttentionRecord):
    """One example read back: its record (weights (L, H, T, S) float32 and its labels) and its
    position in the split."""

    index: int


# What each scalar's dtype kind must be (numpy kinds: U text, i/u integer, f float).
_SCALAR_KINDS = {
    "format": "U",
    "version": "iu",
    "split": "U",
    "family": "U",
    "beam": "iu",
    "length_penalty": "f",
    "layers": "iu",
    "heads": "iu",
    "src_kind": "U",
    "tgt_kind": "U",
    "count": "iu",
}
_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
    (3, 0): np.lib.format.read_array_header_2_0,  # 3.0 differs only in the header's encoding
}


def _member_headers(
    path: Path, fail: Callable[[str], UserError]
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every .npy member of an .npz archive, read from the headers alone.

    A member whose header declares more data than it holds (or object arrays, which would need
    pickle) is refused here, so a crafted archive cannot make np.load allocate what it claims.
    """
    headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                key = info.filename.removesuffix(".npy")
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    reader = _HEADER_READERS.get(version)
                    if reader is None:
                        raise fail(f"{key} has .npy format version {version}")
                    shape, _, dtype = reader(member)
                    header_bytes = member.tell()
                if dtype.hasobject:
                    raise fail(f"entry {key!r} cannot be read: it holds Python objects")
                declared = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if declared != info.file_size - header_bytes:
                    raise fail(
                        f"{key} declares {declared:,} bytes of data but holds "
                        f"{info.file_size - header_bytes:,}"
                    )
                headers[key] = (tuple(shape), dtype)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        raise fail(f"unreadable archive member: {error}") from None
    return headers


class SavedAttention:
    """A file written by `save_attention`, opened for reading (checked on opening).

    Use as a context manager, or call `close()`; `example(i)` reads one example.

    Raises:
        UserError: the file is missing, not an .npz archive, not an attnseq attention file,
            of another version, or inconsistent (a message says which).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"attention file not found: {self.path}")
        if not zipfile.is_zipfile(self.path):  # np.load would try (and refuse) pickle
            raise UserError(
                f"cannot read {self.path}: not a NumPy .npz archive of the attention "
                "that `attnseq eval` saves"
            )
        self._headers = _member_headers(self.path, self._fail)
        try:
            self._npz = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
            raise UserError(
                f"cannot read {self.path}: not a NumPy .npz archive of the attention "
                f"that `attnseq eval` saves ({type(error).__name__}: {error})"
            ) from None
        if not isinstance(self._npz, np.lib.npyio.NpzFile):  # a lone .npy array
            raise UserError(f"{self.path} is a single .npy array, not an attention .npz archive")
        try:
            self._check()
        except UserError:
            self.close()
            raise

    def _fail(self, problem: str) -> UserError:
        return UserError(
            f"{self.path} is not a valid attnseq attention file ({problem}); `attnseq eval` "
            "writes one when asked to save the attention"
        )

    def _get(self, key: str) -> np.ndarray:
        try:
            return self._npz[key]
        except KeyError:
            raise self._fail(f"no {key!r} entry") from None
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
            raise self._fail(f"entry {key!r} cannot be read: {error}") from None

    def _check_headers(self) -> None:
        """Shapes and kinds from the headers, before any array is read: a crafted header can
        declare any size, and np.load would allocate it."""
        for key in (*SCALAR_KEYS, *ARRAY_KEYS):
            if key not in self._headers:
                raise self._fail(f"no {key!r} entry")
        for key, kind in _SCALAR_KINDS.items():
            shape, dtype = self._headers[key]
            if shape != () or dtype.kind not in kind:
                raise self._fail(f"{key} is a {dtype} array of shape {shape}, not a scalar")
        for key in ARRAY_KEYS:
            if len(self._headers[key][0]) != 1:
                raise self._fail(f"{key} has shape {self._headers[key][0]}, not one dimension")

    def _check(self) -> None:
        self._check_headers()
        meta = {key: self._get(key) for key in SCALAR_KEYS}
        if meta["format"].shape != () or str(meta["format"]) != FORMAT:
            raise self._fail(f"format marker is not {FORMAT!r}")
        if int(meta["version"]) != VERSION:
            raise UserError(
                f"{self.path} has attention file version {int(meta['version'])}; this attnseq "
                f"reads version {VERSION}"
            )
        self.meta: dict[str, Any] = {key: value.item() for key, value in meta.items()}
        self.count = int(self.meta["count"])
        if self.count < 0 or min(int(self.meta["layers"]), int(self.meta["heads"])) < 1:
            raise self._fail("count, layers or heads out of range")
        self._arrays = {key: self._get(key) for key in ARRAY_KEYS}
        for side in ("src", "hyp"):
            offsets = self._arrays[f"{side}_offsets"]
            total = len(self._arrays[f"{side}_tokens"])
            if (
                offsets.shape != (self.count + 1,)
                or offsets[0] != 0
                or offsets[-1] != total
                or np.any(np.diff(offsets) < 0)
                or len(self._arrays[f"{side}_ids"]) != total
            ):
                raise self._fail(f"{side}_offsets do not index {side}_tokens")
        for key in ("src_text", "hyp_text", "ref_text", "score"):
            if self._arrays[key].shape != (self.count,):
                raise self._fail(f"{key} has shape {self._arrays[key].shape}, not ({self.count},)")

    @property
    def family(self) -> str:
        return str(self.meta["family"])

    def __len__(self) -> int:
        return self.count

    def example(self, index: int, name: str = "index") -> SavedExample:
        """Example `index` (0-based, the split's order); `name`: what a message calls the
        index (a command passes its option).

        Raises:
            UserError: index out of range, or its weights missing or of the wrong shape.
        """
        if not 0 <= index < self.count:
            raise UserError(
                f"{name} {index} is out of range: {self.path} holds {self.count} examples "
                f"(0..{self.count - 1})"
                if self.count
                else f"{name} {index} is out of range: {self.path} holds no examples"
            )
        a = self._arrays
        s0, s1 = int(a["src_offsets"][index]), int(a["src_offsets"][index + 1])
        t0, t1 = int(a["hyp_offsets"][index]), int(a["hyp_offsets"][index + 1])
        expected = (int(self.meta["layers"]), int(self.meta["heads"]), t1 - t0, s1 - s0)
        header = self._headers.get(weights_key(index))
        if header is None:
            raise self._fail(f"no {weights_key(index)!r} entry")
        if header[0] != expected or header[1].kind != "f":
            raise self._fail(f"{weights_key(index)} has shape {header[0]}, expected {expected}")
        weights = self._get(weights_key(index))
        segments, segment_weights = self._segment_level(index, t1 - t0, s1 - s0)
        return SavedExample(
            index=index,
            weights=weights,
            src_tokens=[str(t) for t in a["src_tokens"][s0:s1]],
            src_ids=a["src_ids"][s0:s1].tolist(),
            hyp_tokens=[str(t) for t in a["hyp_tokens"][t0:t1]],
            hyp_ids=a["hyp_ids"][t0:t1].tolist(),
            src_text=str(a["src_text"][index]),
            hyp_text=str(a["hyp_text"][index]),
            ref_text=str(a["ref_text"][index]),
            score=float(a["score"][index]),
            segments=segments,
            segment_weights=segment_weights,
        )

    def _segment_level(
        self, index: int, rows: int, n_src: int
    ) -> tuple[list[int] | None, np.ndarray | None]:
        """A hierarchical model's segment ids (S,) and segment attention (T, N) of example
        `index`, checked against its headers first; (None, None) for other models."""
        ids_key, weights_key_ = segments_key(index), segment_weights_key(index)
        if ids_key not in self._headers or weights_key_ not in self._headers:
            return None, None
        (ids_shape, ids_dtype), (shape, dtype) = self._headers[ids_key], self._headers[weights_key_]
        if ids_shape != (n_src,) or ids_dtype.kind not in "iu":
            raise self._fail(f"{ids_key} has shape {ids_shape}, expected ({n_src},)")
        if len(shape) != 2 or shape[0] != rows or shape[1] > max(n_src, 1) or dtype.kind != "f":
            raise self._fail(f"{weights_key_} has shape {shape}, expected ({rows}, N <= {n_src})")
        return self._get(ids_key).tolist(), self._get(weights_key_)

    def close(self) -> None:
        self._npz.close()

    def __enter__(self) -> "SavedAttention":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
