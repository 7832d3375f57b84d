"""Reading text pairs from local files (parallel, TSV, JSON lines) and from the Hugging Face Hub.

Lines end at "\\n" alone, as `wc -l` counts them: a lone "\\r" inside a line is text, never a
break that would shift one side of a parallel corpus against the other.
"""

import contextlib
import gzip
import itertools
import json
import lzma
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnseq.data.locations import WHERE_TO_GET_DATA, cache_root
from attnseq.errors import UserError
from attnseq.io.user_paths import check_input_file

Pairs = list[tuple[str, str]]

_DEFAULT_TSV_FIELDS = {"src": 0, "tgt": 1}


def read_parallel(src_files: Path | Sequence[Path], tgt_files: Path | Sequence[Path]) -> Pairs:
    """Line-aligned text files -> pairs, the files of each side read one after the other (the
    shards of a split). Shard k of one side must have as many lines as shard k of the other.
    """
    src_list = [src_files] if isinstance(src_files, Path) else list(src_files)
    tgt_list = [tgt_files] if isinstance(tgt_files, Path) else list(tgt_files)
    return list(ParallelStream(src_list, tgt_list))


BLOCK_LINES = 50_000  # lines read at a time: one C-level read per block, not per line


def parallel_blocks(
    src_file: Path, tgt_file: Path, size: int = BLOCK_LINES
) -> Iterator[tuple[list[str], list[str]]]:
    """The (source, target) lines of two line-aligned files, `size` of each at a time (fewer
    in the last block), outer whitespace stripped; a UserError with both files' line counts
    when one ends before the other."""
    src_blocks, tgt_blocks = line_blocks(src_file, size), line_blocks(tgt_file, size)
    count = 0  # lines of each file read so far
    for src, tgt in itertools.zip_longest(src_blocks, tgt_blocks, fillvalue=[]):
        if len(src) != len(tgt):  # every block but the last holds `size` lines
            src_count = count + len(src) + sum(map(len, src_blocks))
            tgt_count = count + len(tgt) + sum(map(len, tgt_blocks))
            raise UserError(
                f"parallel files differ in length: {src_file} has {src_count} lines but "
                f"{tgt_file} has {tgt_count}; line N of one must translate line N of the other"
            )
        count += len(src)
        yield list(map(str.strip, src)), list(map(str.strip, tgt))


class ParallelStream:
    """The pairs of a parallel split's shards, streamed from the files on every iteration
    (`limit`: only the first pairs): what preparation reads a large corpus through, so that no
    list of its lines is ever built. Each pass reads the files again."""

    def __init__(
        self, src_files: Sequence[Path], tgt_files: Sequence[Path], limit: int | None = None
    ) -> None:
        if len(src_files) != len(tgt_files):
            raise UserError(
                f"{len(src_files)} source files but {len(tgt_files)} target files: "
                f"{', '.join(map(str, src_files))} against {', '.join(map(str, tgt_files))}"
            )
        self.src_files, self.tgt_files, self.limit = list(src_files), list(tgt_files), limit

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return itertools.chain.from_iterable(
            zip(src, tgt, strict=True) for src, tgt in self.blocks()
        )

    def blocks(self, size: int = BLOCK_LINES) -> Iterator[tuple[list[str], list[str]]]:
        """The pairs as (sources, targets) blocks of at most `size` lines (a shard's last block
        and the block `limit` cuts hold fewer)."""
        left = self.limit
        for src_file, tgt_file in zip(self.src_files, self.tgt_files, strict=True):
            for src, tgt in parallel_blocks(src_file, tgt_file, size):
                if left is not None:
                    if left <= len(src):
                        yield src[:left], tgt[:left]
                        return
                    left -= len(src)
                yield src, tgt

    def side(self, side: int) -> "SideTexts":
        """The stripped texts of one side (0: source, 1: target), reading only its files."""
        return SideTexts(self.src_files if side == 0 else self.tgt_files, self.limit)


class SideTexts:
    """The lines of one side's shards, stripped, read anew on every iteration (`limit`: only
    the first lines). The other side's files are not opened, so their line counts are checked
    where the pairs are read, not here."""

    def __init__(self, files: Sequence[Path], limit: int | None) -> None:
        self.files, self.limit = list(files), limit

    def __iter__(self) -> Iterator[str]:
        lines = itertools.chain.from_iterable(
            map(str.strip, block) for path in self.files for block in line_blocks(path)
        )
        return lines if self.limit is None else itertools.islice(lines, self.limit)


COMPRESSED = {".gz": gzip.open, ".xz": lzma.open}  # suffix -> opener of a compressed file


def line_blocks(
    path: Path, size: int = BLOCK_LINES, name: str = "data file"
) -> Iterator[list[str]]:
    """The lines of a UTF-8 text file (gzip or xz when its name ends in .gz or .xz), `size` at
    a time (fewer in the last block), each with its line end; only "\\n" ends a line (the
    module docstring), so there are as many lines as `wc -l` counts (one more when the last
    line has no "\\n"). `name`: what the messages call the file ("data file", "--ref file").

    A file that is not a regular, non-empty file (`check_input_file`), is not valid UTF-8, or
    is a compressed file that is truncated or corrupt, is a UserError naming the file (and the
    line).
    """
    check_input_file(path, name)
    opener = COMPRESSED.get(path.suffix.lower(), open)
    number = 0  # lines read so far
    try:
        with opener(path, "rt", encoding="utf-8", newline="\n") as handle:
            while block := list(itertools.islice(handle, size)):
                number += len(block)
                yield block
    except UnicodeDecodeError:
        # Text files decode a block at a time, ahead of the lines read: find the line.
        with opener(path, "rb") as raw_lines:
            for number, raw in enumerate(raw_lines, start=1):  # noqa: B007
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as bad:
                    raise UserError(
                        f"{path}: line {number} is not valid UTF-8 ({bad.reason} at byte "
                        f"{bad.start} of the line); {name}s must be UTF-8 text"
                    ) from None
        raise UserError(f"{path} is not valid UTF-8; {name}s must be UTF-8 text") from None
    except (EOFError, OSError, lzma.LZMAError) as bad:
        kind = path.suffix.lower().lstrip(".")
        if opener is not open:  # the block that failed was read in part: count its lines
            number = _lines_before_failure(opener, path)
        raise UserError(
            f"cannot read {path} after line {number}: {bad} (a truncated or corrupt {kind} file?)"
            if opener is not open
            else f"cannot read {path} after line {number}: {bad}"
        ) from None


def text_lines(path: Path, name: str = "data file") -> list[str]:
    """The lines of a text file as `line_blocks` reads them (`wc -l`'s count), each without
    its line end ("\\n", or a Windows "\\r\\n"): the rule of every reader of text lines.
    `name`: what the messages call the file."""
    return [
        line.removesuffix("\n").removesuffix("\r")
        for block in line_blocks(path, name=name)
        for line in block
    ]


def _lines_before_failure(opener: Any, path: Path) -> int:
    """How many lines of a truncated or corrupt compressed file can be read."""
    count = 0
    with contextlib.suppress(EOFError, OSError, lzma.LZMAError), opener(path, "rb") as raw:
        for count, _ in enumerate(raw, start=1):  # noqa: B007 (the count is the result)
            pass
    return count


def read_tsv(path: Path, src_field: str, tgt_field: str) -> Pairs:
    """TAB-separated columns with no quoting at all (a `"` is part of the text: Tatoeba's
    sentences hold them). The fields "src"/"tgt" are columns 0 and 1, a number is a 0-based
    column, any other name a column of the header line."""
    lines = text_lines(path)
    columns = [_tsv_column(src_field), _tsv_column(tgt_field)]
    first_line = 1
    if any(isinstance(column, str) for column in columns):
        if not lines:
            raise UserError(f"{path} is empty; expected a header line naming {columns}")
        header = lines[0].split("\t")
        for name in (c for c in columns if isinstance(c, str)):
            if name not in header:
                raise UserError(
                    f"{path}: no column {name!r} in the header line; columns: {', '.join(header)}"
                    " (or give data.src_field/tgt_field as 0-based column numbers)"
                )
        columns = [header.index(c) if isinstance(c, str) else c for c in columns]
        lines, first_line = lines[1:], 2
    src_column, tgt_column = columns
    need = max(src_column, tgt_column) + 1
    pairs: Pairs = []
    for number, line in enumerate(lines, start=first_line):
        fields = line.split("\t")
        if len(fields) < need:
            if not line.strip():
                pairs.append(("", ""))  # a blank line: an empty pair, counted and dropped later
                continue
            raise UserError(
                f"{path}: line {number} has {len(fields)} TAB-separated column(s), needs "
                f"{need} (source column {src_column}, target column {tgt_column})"
            )
        pairs.append((fields[src_column].strip(), fields[tgt_column].strip()))
    return pairs


def _tsv_column(field: str) -> int | str:
    if field in _DEFAULT_TSV_FIELDS:
        return _DEFAULT_TSV_FIELDS[field]
    return int(field) if field.isdigit() else field


def read_jsonl(path: Path, src_field: str, tgt_field: str) -> Pairs:
    """One JSON object per line; fields may be dotted paths (`translation.de`)."""
    dataset = _load_local("json", path, fields={"src_field": src_field, "tgt_field": tgt_field})
    try:
        return _pairs_from_dataset(dataset, src_field, tgt_field, str(path), path)
    except UnicodeDecodeError as error:
        # Arrow's JSON reader lets some invalid UTF-8 through; it surfaces on conversion.
        raise _diagnose(path, "json", error) from None


def read_hub(name: str, config: str | None, split: str, src_field: str, tgt_field: str) -> Pairs:
    """`datasets.load_dataset(name, config, split=split)` -> pairs; `name` may end in @REVISION."""
    import datasets

    repo, _, revision = name.partition("@")
    what = f"hub dataset {repo!r}" + (f" (config {config!r})" if config else "")
    try:
        dataset = datasets.load_dataset(repo, config, split=split, revision=revision or None)
    except Exception as error:  # the library raises many types; all mean "cannot fetch"
        raise UserError(_hub_failure(what, split, error)) from None
    return _pairs_from_dataset(dataset, src_field, tgt_field, f"{what} split {split!r}")


def _hub_failure(what: str, split: str, error: Exception) -> str:
    import datasets

    reason = _root_message(error)
    # Connection failures surface as ConnectionError, httpx.ConnectError, OfflineModeIsEnabled
    # or a "Couldn't reach" message depending on where the library notices; match them all.
    chain = [error, _root_error(error)]
    offline = (
        bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))
        or any(isinstance(e, (ConnectionError, TimeoutError)) for e in chain)
        or any(w in type(e).__name__ for e in chain for w in ("Connect", "Timeout", "Offline"))
        or "couldn't reach" in reason.lower()
    )
    if "scripts are no longer supported" in reason:
        hint = (
            "it is a loading-script dataset, which this `datasets` version cannot run; try its "
            "Parquet export (data.hub_name=NAME@refs/convert/parquet) or download the files "
            "and use data.source=local"
        )
    elif offline:
        hint = (
            "this machine looks offline (or the Hub is unreachable), and the dataset is not in "
            "the local `datasets` cache; fetch it once with network access, or use local files "
            f"(data.source=local; {WHERE_TO_GET_DATA})"
        )
    else:
        hint = (
            "check data.hub_name, data.hub_config and data.splits, or use local files "
            f"(data.source=local; {WHERE_TO_GET_DATA})"
        )
    return f"could not fetch {what} split {split!r}: {reason}; {hint}"


def _pairs_from_dataset(
    dataset: Any, src_field: str, tgt_field: str, origin: str, path: Path | None = None
) -> Pairs:
    """Two (possibly dotted) columns of a `datasets.Dataset` as stripped text pairs.

    `path`: the JSON-lines file the dataset was read from, to name the line of a bad value.
    """
    # flatten() turns nested structs into dotted column names: translation -> translation.de
    flat = dataset.flatten()
    columns = []
    for key, field in (("src_field", src_field), ("tgt_field", tgt_field)):
        if field not in flat.column_names:
            raise UserError(
                f"{origin} has no field {field!r} (data.{key}); fields: "
                f"{', '.join(flat.column_names)}"
            )
        columns.append(text_column(flat, field, key, origin, path))
    return [(src.strip(), tgt.strip()) for src, tgt in zip(*columns, strict=True)]


def _load_local(builder: str, path: Path, fields: dict[str, str] | None = None) -> Any:
    """`datasets.load_dataset(builder, data_files=path)` with errors turned into UserError.

    The library keeps an Arrow copy of the file under cache_root()/datasets, keyed by the
    file's path and modification time, so a second read is a memory map. `fields`
    ({"src_field": name, ...}): JSON fields whose values must be strings, checked on the
    raw lines when the library cannot read the file.
    """
    import datasets

    check_input_file(path, "data file")
    try:
        with quiet_datasets():
            return datasets.load_dataset(
                builder,
                data_files=str(path),
                split="train",
                cache_dir=str(cache_root() / "datasets"),
            )
    except Exception as error:  # DatasetGenerationError wraps the real cause
        raise _diagnose(path, builder, error, fields) from None


def _diagnose(
    path: Path, builder: str, error: Exception, fields: dict[str, str] | None = None
) -> UserError:
    """A UserError naming the file and, where it can be found, the offending line."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                return UserError(
                    f"{path}: line {number} is not valid UTF-8 ({bad.reason} at byte "
                    f"{bad.start} of the line); data files must be UTF-8 text"
                )
            if builder == "json" and line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as bad:
                    return UserError(f"{path}: line {number} is not valid JSON ({bad.msg})")
                if not isinstance(record, dict):
                    return UserError(
                        f"{path}: line {number} is a JSON {type(record).__name__}, "
                        "expected one object per line"
                    )
                for key, field in (fields or {}).items():
                    value = raw_field(record, field)
                    if value is not None and not isinstance(value, str):
                        return not_text_error(f"{path}: line {number}", field, key, value)
    return UserError(f"could not read {path} as {builder}: {_root_message(error)}")


def _root_error(error: BaseException) -> BaseException:
    seen: set[int] = set()
    while id(error) not in seen:
        seen.add(id(error))
        cause = error.__cause__ or error.__context__
        if cause is None:
            break
        error = cause
    return error


def _root_message(error: BaseException) -> str:
    root = _root_error(error)
    message = str(root).strip().splitlines()
    return f"{type(root).__name__}: {message[0] if message else ''}".rstrip(": ")


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """No progress bars for local files (converted in well under a second); restored after."""
    from datasets.utils import logging as datasets_logging

    was_enabled = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            datasets_logging.enable_progress_bar()


_TEXT_DTYPES = ("string", "large_string", "null")  # null: a column with no value at all
_JSON_TYPES = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}


def text_column(flat: Any, field: str, key: str, origin: str, path: Path | None) -> list[str]:
    """The values of the (flattened) column `field` of a `datasets.Dataset`, each a string
    (None, a missing value, as ""); a value of any other type is a UserError naming the line
    of `path` (or the record number of `origin`) and `key`, the config key naming the field.

    `path`: the JSON-lines file the dataset was read from. A column Arrow did not type as text
    is then read again from the file itself, since Arrow's type says little about the values:
    it parses strings such as "1998-03-03" as timestamps, and keeps a field whose type varies
    between records as JSON text.
    """
    import datasets

    feature = flat.features[field]
    values = flat.data.column(field).to_pylist()
    if isinstance(feature, datasets.Value) and feature.dtype in _TEXT_DTYPES:
        return ["" if value is None else value for value in values]
    if path is not None:
        return _raw_texts(path, field, key)
    json_feature = getattr(datasets, "Json", None)  # older versions fail on mixed types instead
    if json_feature is not None and isinstance(feature, json_feature):
        values = [None if value is None else json.loads(value) for value in values]
    for number, value in enumerate(values, start=1):
        if value is not None and not isinstance(value, str):
            raise not_text_error(f"{origin}: record {number}", field, key, value)
    return ["" if value is None else value for value in values]


def _raw_texts(path: Path, field: str, key: str) -> list[str]:
    """The values of `field` in every record of a JSON-lines file, as the file holds them."""
    texts = []
    with path.open("rb") as handle:
        # Records end at b"\n" only: a JSON string may hold a raw U+2028.
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            value = raw_field(json.loads(raw), field)
            if value is not None and not isinstance(value, str):
                raise not_text_error(f"{path}: line {number}", field, key, value)
            texts.append("" if value is None else value)
    return texts


def not_text_error(where: str, field: str, key: str, value: Any) -> UserError:
    """The error for a non-string `value` of `field` at `where` ("FILE: line N")."""
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    shown = json.dumps(value, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return UserError(
        f"{where} field {field!r} (data.{key}) holds a JSON {kind} ({shown}), not a string; "
        "every source and target must be a JSON string (null if missing); name a string "
        "field (dotted for nested objects, e.g. translation.de)"
    )


def raw_field(record: dict[str, Any], field: str) -> Any:
    """The value at a dotted path of a JSON object (None where the path does not lead)."""
    value: Any = record
    for part in field.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
