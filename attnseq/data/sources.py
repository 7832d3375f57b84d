"""Where the (source, target) text pairs of each split come from (`data.source`): generated from
the seed, local files under the data root in one of the `data.format` formats, or the Hub; a
missing valid or test split is held out of train (`hold_out`)."""

import glob
import hashlib
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from attnseq.config.choices import DataSource, FileFormat
from attnseq.config.schema import DataConfig
from attnseq.data.file_readers import (
    COMPRESSED,
    Pairs,
    ParallelStream,
    read_hub,
    read_jsonl,
    read_parallel,
    read_tsv,
)
from attnseq.data.generated import TASKS, make_splits
from attnseq.data.locations import WHERE_TO_GET_DATA, data_root, resolve_data_path, with_suffix
from attnseq.errors import UserError
from attnseq.io.user_paths import check_input_file

EVAL_SPLITS = ("valid", "test")  # the splits `hold_out` can derive from train
HOLDOUT_FRACTION = 0.01  # of the distinct source sentences, per held-out split
HOLDOUT_SALT = "attnseq-holdout-v1"  # changing it would change every derived test set


def split_files(cfg: DataConfig) -> dict[str, list[Path]]:
    """The local files of every split in `data.splits`: for parallel data the source files,
    then as many target files (shard k of one side pairs with shard k of the other).

    A parallel prefix may hold glob patterns (`wmt/train-*`: every match of `PREFIX.SRC_LANG`,
    in sorted order, one shard each) and each file may be gzip or xz compressed
    (`PREFIX.SRC_LANG.gz`, `.xz`), read as a stream.

    Raises UserError for a file that does not exist, a pattern that matches nothing, sides
    with different numbers of shards (saying what was expected where), or a path that is not
    a regular file: a folder, a device, a socket or a named pipe, whose opening alone can
    block until a writer comes (found by `stat`, before anything opens it).
    """
    files: dict[str, list[Path]] = {}
    for split, value in cfg.splits.items():
        where = resolve_data_path(value, cfg)
        if cfg.format is FileFormat.parallel:
            expected = (
                f"parallel text files {with_suffix(where, cfg.src_lang).name} and "
                f"{with_suffix(where, cfg.tgt_lang).name} (optionally .gz or .xz; "
                f"data.splits.{split}={value!r} is a path prefix, glob patterns allowed; the "
                f"suffixes are data.src_lang={cfg.src_lang!r} and "
                f"data.tgt_lang={cfg.tgt_lang!r})"
            )
            src = _side_files(with_suffix(where, cfg.src_lang), expected, cfg)
            tgt = _side_files(with_suffix(where, cfg.tgt_lang), expected, cfg)
            if len(src) != len(tgt):
                raise UserError(
                    f"data.splits.{split}={value!r} matches {len(src)} {cfg.src_lang} files but "
                    f"{len(tgt)} {cfg.tgt_lang} files; every shard needs both sides"
                )
            files[split] = [*src, *tgt]
            continue
        expected = f"a {cfg.format.name} file (data.splits.{split}={value!r})"
        _check_exists(where, expected, cfg)
        files[split] = [where]
    for paths in files.values():
        for path in paths:
            _check_regular(path)
    return files


def _check_regular(path: Path) -> None:
    """UserError naming what `path` is when it is not a regular file (stat only, no open)."""
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except OSError:
        regular = False
    if not regular:
        check_input_file(path, "data file")  # names the kind: folder, pipe, device, socket


def _side_files(path: Path, expected: str, cfg: DataConfig) -> list[Path]:
    """The files of one side of a parallel split: `path` (or `path`.gz/.xz), or every match
    of the pattern, sorted."""
    candidates = [path, *(path.with_name(path.name + suffix) for suffix in COMPRESSED)]
    if not glob.has_magic(str(path)):
        # exists(), not is_file(): a pipe or a device at the path is named as what it is
        found = next((candidate for candidate in candidates if candidate.exists()), None)
        _check_exists(found or path, expected, cfg)
        return [found or path]
    matches = sorted({Path(match) for pattern in candidates for match in glob.glob(str(pattern))})
    if not matches:
        raise UserError(
            f"no data file matches {path} (nor {path.name}.gz, .xz); expected {expected} "
            f"under the data root {data_root(cfg)}"
        )
    return matches


def _check_exists(path: Path, expected: str, cfg: DataConfig) -> None:
    if not path.exists():
        raise UserError(
            f"data file not found: {path}; expected {expected} under the data root "
            f"{data_root(cfg)}; set data.root=DIR (or $ATTNSEQ_DATA) to the folder "
            f"that holds it ({WHERE_TO_GET_DATA})"
        )


# ------------------------------------------------------------------------------ entry points
def load_splits(
    cfg: DataConfig, seed: int, splits: Sequence[str] | None = None
) -> dict[str, Pairs]:
    """{split: pairs} for the configured dataset: "train", "valid", "test" (and any other split
    named in `data.splits`), or only the names in `splits`.

    `seed` drives generated tasks only; held-out splits of real data use a fixed rule
    (`hold_out`).
    """
    if cfg.source is DataSource.generated:
        return _generated_splits(cfg, seed, splits)
    if not cfg.splits:
        raise UserError(
            f"data.splits is empty: data.source={cfg.source.name} needs a map split -> "
            + ("hub split name" if cfg.source is DataSource.hub else "file or path prefix")
            + ", e.g. {train: ..., valid: ..., test: ...} (as the packaged data=multi30k has it)"
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


def split_streams(
    cfg: DataConfig, seed: int, splits: Sequence[str] | None = None
) -> dict[str, Iterable[tuple[str, str]]]:
    """`load_splits`, with local parallel splits as streams read from their files on every
    pass (`ParallelStream`, `data.max_examples` applied) instead of lists: how preparation
    reads a corpus of millions of pairs. Splits held out of train (which need all of train at
    once), other formats and the hub come as `load_splits`' lists."""
    wanted = (
        list(splits) if splits is not None else list(dict.fromkeys([*cfg.splits, *EVAL_SPLITS]))
    )
    streamable = (
        cfg.source is DataSource.local
        and cfg.format is FileFormat.parallel
        and all(name in cfg.splits for name in wanted)
    )
    if not streamable:
        return dict(load_splits(cfg, seed, splits))
    files = split_files(cfg)  # every missing file named before any reading starts
    streams: dict[str, Iterable[tuple[str, str]]] = {}
    for name in wanted:
        half = len(files[name]) // 2
        limit = cfg.max_examples if name == "train" else None
        streams[name] = ParallelStream(files[name][:half], files[name][half:], limit)
    return streams


class NoDataAtPath(UserError):
    """`load_pairs_from_path` found nothing at all at the path (no file, no parallel prefix):
    a caller that also takes split names can say which names it knows instead."""


def load_pairs_from_path(path: str | Path, cfg: DataConfig) -> Pairs:
    """Pairs of an arbitrary file to evaluate on, with `cfg`'s languages and field names.

    `path` (as given, else under the data root) is a parallel prefix when PATH.SRC_LANG and
    PATH.TGT_LANG exist, a JSON-lines file when it ends in .jsonl/.json, a TSV file when it
    ends in .tsv, and otherwise a file in `data.format` (tsv when that is parallel).
    """
    given = Path(path).expanduser()
    candidates = [given] if given.is_absolute() else [given, data_root(cfg) / given]
    other = None  # the first candidate that exists but is no regular file
    for where in candidates:
        src_file, tgt_file = with_suffix(where, cfg.src_lang), with_suffix(where, cfg.tgt_lang)
        if src_file.is_file() and tgt_file.is_file():
            return read_parallel(src_file, tgt_file)
        if where.is_file():
            suffix = where.suffix.lower()
            if suffix in (".jsonl", ".json"):
                return read_jsonl(where, cfg.src_field, cfg.tgt_field)
            if suffix == ".tsv" or cfg.format is not FileFormat.jsonl:
                return read_tsv(where, cfg.src_field, cfg.tgt_field)
            return read_jsonl(where, cfg.src_field, cfg.tgt_field)
        if where.exists():
            other = other or where
    if other is not None:  # a folder, a device, a pipe: named as what it is
        check_input_file(other, "data file")
    looked = ", ".join(
        f"{where} or {with_suffix(where, cfg.src_lang).name}+"
        f"{with_suffix(where, cfg.tgt_lang).name}"
        for where in candidates
    )
    raise NoDataAtPath(
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
        half = len(paths) // 2
        return read_parallel(paths[:half], paths[half:])
    if cfg.format is FileFormat.tsv:
        return read_tsv(paths[0], cfg.src_field, cfg.tgt_field)
    return read_jsonl(paths[0], cfg.src_field, cfg.tgt_field)


def hold_out(pairs: Pairs, names: Sequence[str]) -> tuple[Pairs, dict[str, Pairs]]:
    """Split `pairs` into (train, {name: held-out pairs}), for a dataset released without a
    valid or test split (Tatoeba).

    Deterministic and independent of the line order and the run seed, so every run of a sweep
    sees the same test set: distinct sources are ranked by SHA-256(HOLDOUT_SALT + source); the
    first n go to names[0], the next n to names[1], ... with n = max(1, round(HOLDOUT_FRACTION
    * distinct sources)). Every pair of a held-out source goes with it, so a sentence with
    several translations never sits on both sides. Pairs keep their file order.
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
