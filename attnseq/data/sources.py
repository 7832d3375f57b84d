"""Where the (source, target) text pairs of each split come from.

Three kinds of source (`data.source`):

- generated: built from the seed (attnseq/data/generated.py), so any run or checkpoint can
  rebuild exactly the same splits without files or network.
- local: files under the data root (`data.root`, else `$ATTNSEQ_DATA`, else `./data`), read
  through the `datasets` library's packaged builders (which convert them to Arrow once and
  memory-map them afterwards) in one of three formats (`data.format`):
    * parallel: `data.splits[split]` is a path prefix; `PREFIX.SRC_LANG` and `PREFIX.TGT_LANG`
      hold one sentence per line, line N of one translating line N of the other (the line
      counts must agree).
    * tsv: one pair per line, columns separated by TAB, with *no quoting at all* (a `"` is an
      ordinary character: Tatoeba's sentences contain them). `data.src_field`/`tgt_field` are
      0-based column numbers; the defaults "src"/"tgt" mean columns 0 and 1; any other name
      means the first line is a header and the named columns are used.
    * jsonl: one JSON object per line; the fields may be dotted paths into nested objects
      (`translation.de`) and must hold JSON strings (null or a missing field is an empty
      text); a number, boolean, array or object is a UserError naming the line, never turned
      into text.
- hub: `datasets.load_dataset(data.hub_name, data.hub_config, split=data.splits[split])`, with
  the same (possibly dotted) field names. `hub_name` may end in `@REVISION` (a branch, tag or
  commit, e.g. `IWSLT/iwslt2017@refs/convert/parquet`).

Every text has its outer whitespace stripped; nothing else is changed (normalisation is the
tokenizer's job).

Held-out splits. A dataset released without a validation and/or test split (Tatoeba) lists only
`train` in `data.splits`; each missing split of ("valid", "test") is then carved out of train by
`hold_out`: the distinct source sentences are ordered by SHA-256 of `HOLDOUT_SALT + source`, and
the first `max(1, round(HOLDOUT_FRACTION * distinct))` sources go to valid, the next as many to
test (in that order, for whichever of the two is missing); every pair whose source is one of
them goes with it, so a sentence with several translations never sits on both sides. The rule
depends only on the text (not on the run seed or the line order), so every run and every seed
of a sweep sees the same test set. `data.max_examples` then keeps the first N training pairs.

User mistakes (missing files, parallel files of different lengths, invalid UTF-8, unknown
fields, an unreachable hub) raise `UserError` naming the file (and line) or the dataset.
"""

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnseq.config.schema import DataConfig, DataSource, FileFormat
from attnseq.data.generated import TASKS, make_splits
from attnseq.data.json_fields import not_text_error, raw_field, text_column
from attnseq.errors import UserError

Pairs = list[tuple[str, str]]

EVAL_SPLITS = ("valid", "test")  # the splits `hold_out` can derive from train
HOLDOUT_FRACTION = 0.01  # of the distinct source sentences, per held-out split
HOLDOUT_SALT = "attnseq-holdout-v1"  # changing it would change every derived test set

_DEFAULT_TSV_FIELDS = {"src": 0, "tgt": 1}


# ------------------------------------------------------------------------------ locations
def data_root(cfg: DataConfig) -> Path:
    """The folder relative data paths resolve against: data.root, $ATTNSEQ_DATA, or ./data."""
    root = cfg.root or os.environ.get("ATTNSEQ_DATA") or "data"
    return Path(root).expanduser()


def cache_root() -> Path:
    """attnseq's cache folder: $ATTNSEQ_CACHE, else ~/.cache/attnseq.

    Holds sentencepiece models (spm/), tokenized splits (prepared/) and the `datasets`
    library's Arrow copies of local files (datasets/). Any of it may be deleted at any time.
    """
    configured = os.environ.get("ATTNSEQ_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "attnseq"


def resolve_data_path(path: str | Path, cfg: DataConfig) -> Path:
    """An absolute (or ~) path as it is; a relative one under `data_root(cfg)`."""
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else data_root(cfg) / candidate


def split_files(cfg: DataConfig) -> dict[str, list[Path]]:
    """The local files of every split in `data.splits` (parallel: source file, target file).

    Raises UserError for a file that does not exist, saying what was expected where.
    """
    files: dict[str, list[Path]] = {}
    for split, value in cfg.splits.items():
        where = resolve_data_path(value, cfg)
        if cfg.format is FileFormat.parallel:
            paths = [_with_suffix(where, cfg.src_lang), _with_suffix(where, cfg.tgt_lang)]
            expected = (
                f"parallel text files {paths[0].name} and {paths[1].name} "
                f"(data.splits.{split}={value!r} is a path prefix; the suffixes are "
                f"data.src_lang={cfg.src_lang!r} and data.tgt_lang={cfg.tgt_lang!r})"
            )
        else:
            paths = [where]
            expected = f"a {cfg.format.name} file (data.splits.{split}={value!r})"
        for path in paths:
            if not path.is_file():
                raise UserError(
                    f"data file not found: {path}; expected {expected} under the data root "
                    f"{data_root(cfg)} (set data.root or $ATTNSEQ_DATA; see data/README.md)"
                )
        files[split] = paths
    return files


def _with_suffix(prefix: Path, lang: str) -> Path:
    # Not Path.with_suffix: "multi30k/test_2016_flickr" + "de", and prefixes may contain dots.
    return prefix.with_name(f"{prefix.name}.{lang}")


# ------------------------------------------------------------------------------ entry points
def load_splits(
    cfg: DataConfig, seed: int, splits: Sequence[str] | None = None
) -> dict[str, Pairs]:
    """{split: pairs} for the configured dataset: "train", "valid", "test" (and any other split
    named in `data.splits`), or only the names in `splits`.

    `seed` drives generated tasks only; held-out splits of real data use a fixed rule (see the
    module docstring).
    """
    if cfg.source is DataSource.generated:
        return _generated_splits(cfg, seed, splits)
    if not cfg.splits:
        raise UserError(
            f"data.splits is empty: data.source={cfg.source.name} needs a map split -> "
            + ("hub split name" if cfg.source is DataSource.hub else "file or path prefix")
            + ", e.g. {train: ..., valid: ..., test: ...} (see the packaged data/multi30k.yaml)"
        )
    derived = [name for name in EVAL_SPLITS if name not in cfg.splits]
    available = list(dict.fromkeys([*cfg.splits, *EVAL_SPLITS]))
    wanted = list(available if splits is None else splits)
    for name in wanted:
        if name not in cfg.splits and not (name in derived and "train" in cfg.splits):
            raise UserError(
                f"unknown split {name!r}: data.splits has {', '.join(cfg.splits)}"
                + ("" if "train" in cfg.splits else " (and no train split to hold it out of)")
            )
    if cfg.source is DataSource.local:
        split_files(cfg)  # every missing file named before any reading starts

    loaded: dict[str, Pairs] = {}
    needs_train = "train" in wanted or any(name in derived for name in wanted)
    if needs_train and "train" in cfg.splits:
        train = _load_split(cfg, "train")
        if derived:
            train, held_out = hold_out(train, derived)
            loaded.update(held_out)
        if cfg.max_examples is not None:
            train = train[: cfg.max_examples]
        loaded["train"] = train
    for name in wanted:
        if name not in loaded:
            loaded[name] = _load_split(cfg, name)
    return {name: loaded[name] for name in wanted}


def load_pairs_from_path(path: str | Path, cfg: DataConfig) -> Pairs:
    """Pairs of an arbitrary file to evaluate on, with `cfg`'s languages and field names.

    `path` (as given, else under the data root) is a parallel prefix when PATH.SRC_LANG and
    PATH.TGT_LANG exist, a JSON-lines file when it ends in .jsonl/.json, a TSV file when it
    ends in .tsv, and otherwise a file in `data.format` (tsv when that is parallel).
    """
    given = Path(path).expanduser()
    candidates = [given] if given.is_absolute() else [given, data_root(cfg) / given]
    for where in candidates:
        src_file, tgt_file = _with_suffix(where, cfg.src_lang), _with_suffix(where, cfg.tgt_lang)
        if src_file.is_file() and tgt_file.is_file():
            return read_parallel(src_file, tgt_file)
        if where.is_file():
            suffix = where.suffix.lower()
            if suffix in (".jsonl", ".json"):
                return read_jsonl(where, cfg.src_field, cfg.tgt_field)
            if suffix == ".tsv" or cfg.format is not FileFormat.jsonl:
                return read_tsv(where, cfg.src_field, cfg.tgt_field)
            return read_jsonl(where, cfg.src_field, cfg.tgt_field)
    looked = ", ".join(
        f"{where} or {_with_suffix(where, cfg.src_lang).name}+"
        f"{_with_suffix(where, cfg.tgt_lang).name}"
        for where in candidates
    )
    raise UserError(
        f"no data at {path}: looked for a .jsonl/.tsv file or a parallel prefix ({looked})"
    )


# ------------------------------------------------------------------------------ per source
def _generated_splits(cfg: DataConfig, seed: int, splits: Sequence[str] | None) -> dict[str, Pairs]:
    if cfg.name not in TASKS:
        raise UserError(
            f"data.name={cfg.name!r} is not a generated task; valid: {', '.join(TASKS)}"
        )
    sizes = {"train": cfg.train_size, "valid": cfg.valid_size, "test": cfg.test_size}
    for name in splits or ():
        if name not in sizes:
            raise UserError(f"unknown split {name!r}; generated tasks have: {', '.join(sizes)}")
    try:
        # All three are always generated: each split's examples depend on the others (no
        # example appears twice), so a subset alone would not reproduce the same test set.
        made = make_splits(
            cfg.name,
            sizes,
            seed,
            min_len=cfg.min_len,
            max_len=cfg.max_len,
            vocab_size=cfg.vocab_size,
        )
    except ValueError as error:
        raise UserError(f"cannot generate data.name={cfg.name}: {error}") from None
    return made if splits is None else {name: made[name] for name in splits}


def _load_split(cfg: DataConfig, split: str) -> Pairs:
    value = cfg.splits[split]
    if cfg.source is DataSource.hub:
        if not cfg.hub_name:
            raise UserError("data.source=hub needs data.hub_name (e.g. bentrevett/multi30k)")
        return read_hub(cfg.hub_name, cfg.hub_config, value, cfg.src_field, cfg.tgt_field)
    paths = split_files(cfg)[split]
    if cfg.format is FileFormat.parallel:
        return read_parallel(paths[0], paths[1])
    if cfg.format is FileFormat.tsv:
        return read_tsv(paths[0], cfg.src_field, cfg.tgt_field)
    return read_jsonl(paths[0], cfg.src_field, cfg.tgt_field)


def hold_out(pairs: Pairs, names: Sequence[str]) -> tuple[Pairs, dict[str, Pairs]]:
    """Split `pairs` into (train, {name: held-out pairs}) by the rule in the module docstring.

    Deterministic and independent of line order: distinct sources are ranked by
    SHA-256(HOLDOUT_SALT + source); the first n go to names[0], the next n to names[1], ...
    with n = max(1, round(HOLDOUT_FRACTION * distinct sources)). Pairs keep their file order.
    """
    sources = list(dict.fromkeys(src for src, _ in pairs))
    if len(sources) <= len(names):
        raise UserError(
            f"cannot hold out {', '.join(names)} from a train split of {len(sources)} distinct "
            "source sentences; list the splits in data.splits"
        )
    ranked = sorted(sources, key=lambda src: hashlib.sha256((HOLDOUT_SALT + src).encode()).digest())
    n = max(1, round(HOLDOUT_FRACTION * len(sources)))
    destination = {src: names[rank // n] for rank, src in enumerate(ranked[: n * len(names)])}
    held: dict[str, Pairs] = {name: [] for name in names}
    train: Pairs = []
    for pair in pairs:
        name = destination.get(pair[0])
        (train if name is None else held[name]).append(pair)
    return train, held


# ------------------------------------------------------------------------------ file readers
def read_parallel(src_file: Path, tgt_file: Path) -> Pairs:
    """Line-aligned text files -> pairs; the two files must have the same number of lines."""
    src_lines = _read_lines(src_file)
    tgt_lines = _read_lines(tgt_file)
    if len(src_lines) != len(tgt_lines):
        raise UserError(
            f"parallel files differ in length: {src_file} has {len(src_lines)} lines but "
            f"{tgt_file} has {len(tgt_lines)}; line N of one must translate line N of the other"
        )
    return [(src.strip(), tgt.strip()) for src, tgt in zip(src_lines, tgt_lines, strict=True)]


def read_tsv(path: Path, src_field: str, tgt_field: str) -> Pairs:
    """TAB-separated columns, no quoting (a `"` is part of the text), no header unless the
    fields are column names (see the module docstring)."""
    lines = _read_lines(path)
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
            "(data.source=local, see data/README.md)"
        )
    else:
        hint = (
            "check data.hub_name, data.hub_config and data.splits, or use local files "
            "(data.source=local, see data/README.md)"
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


# ------------------------------------------------------------------------------ via datasets
def _read_lines(path: Path) -> list[str]:
    """The lines of a text file through the `datasets` "text" builder (newline removed)."""
    dataset = _load_local("text", path)
    return dataset.data.column("text").to_pylist()


def _load_local(builder: str, path: Path, fields: dict[str, str] | None = None) -> Any:
    """`datasets.load_dataset(builder, data_files=path)` with errors turned into UserError.

    The library keeps an Arrow copy of the file under cache_root()/datasets, keyed by the
    file's path and modification time, so a second read is a memory map. `fields`
    ({"src_field": name, ...}): JSON fields whose values must be strings, checked on the
    raw lines when the library cannot read the file.
    """
    import datasets

    if not path.is_file():
        raise UserError(f"data file not found: {path}")
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
