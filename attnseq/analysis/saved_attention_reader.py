"""Reading a saved-attention file (the format is described in saved_attention.py): `SavedAttention`
opens and checks an archive, `example(i)` reads one example back.

Every check runs on opening, most of them on the .npy headers alone, before any array is read:
a file is user input, and a crafted header could otherwise make np.load allocate whatever it
declares. Every problem is a UserError that names the file and says how to write a valid one.
"""

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnseq.analysis.saved_attention import (
    ARRAY_KEYS,
    FORMAT,
    SCALAR_KEYS,
    VERSION,
    AttentionRecord,
    segment_weights_key,
    segments_key,
    weights_key,
)
from attnseq.errors import UserError


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
                f"cannot read {self.path}: not a NumPy .npz archive written by "
                "`attnseq eval --save-attention`"
            )
        self._headers = _member_headers(self.path, self._fail)
        try:
            self._npz = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
            raise UserError(
                f"cannot read {self.path}: not a NumPy .npz archive written by "
                f"`attnseq eval --save-attention` ({type(error).__name__}: {error})"
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
            f"{self.path} is not a valid attnseq attention file ({problem}); write one with "
            "`attnseq eval CHECKPOINT --save-attention`"
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

    def example(self, index: int) -> SavedExample:
        """Example `index` (0-based, the split's order).

        Raises:
            UserError: index out of range, or its weights missing or of the wrong shape.
        """
        if not 0 <= index < self.count:
            raise UserError(
                f"--index {index} is out of range: {self.path} holds {self.count} examples "
                f"(0..{self.count - 1})"
                if self.count
                else f"--index {index} is out of range: {self.path} holds no examples"
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
