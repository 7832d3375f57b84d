"""Data files checked before they are read: pipes, sockets, devices and folders are refused by
what `stat` says (nothing opens them, so nothing blocks), and every reader counts lines as
`wc -l` does (only "\\n" ends a line)."""

import gzip
import lzma
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import attnseq_in_process

from attnseq.config.choices import DataSource, FileFormat, TokenizerKind
from attnseq.config.schema import DataConfig
from attnseq.data.sources import load_splits, split_files, split_streams
from attnseq.errors import UserError

PARALLEL = {"train": "train", "valid": "valid", "test": "valid"}


pytestmark = pytest.mark.usefixtures("cache")  # conftest.py's: a cache of its own


def parallel(root: Path, splits: dict[str, str] = PARALLEL) -> DataConfig:
    return DataConfig(
        name="test",
        source=DataSource.local,
        format=FileFormat.parallel,
        root=str(root),
        splits=splits,
        src_lang="src",
        tgt_lang="tgt",
        tokenizer=TokenizerKind.word,
    )


def corpus(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in ("train", "valid"):
        (root / f"{name}.src").write_text("a b\nc d\n", encoding="utf-8")
        (root / f"{name}.tgt").write_text("x y\nz w\n", encoding="utf-8")


@pytest.fixture
def unblock_pipes() -> Iterator[Callable[[Path], None]]:
    """Pipes a test makes get a writer after 20 s if a reader still waits on one: a check
    that opened a pipe would then fail its assertions instead of hanging the test run."""
    pipes: list[Path] = []
    done = threading.Event()

    def writer() -> None:
        if done.wait(20):
            return
        for pipe in pipes:
            try:
                descriptor = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader waits on this one
                continue
            os.close(descriptor)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    yield pipes.append
    done.set()
    thread.join()


def special(kind: str, path: Path, unblock: Callable[[Path], None]) -> tuple[Any, str]:
    """Put a `kind` of file at `path`; what keeps it alive and how the error names it."""
    path.unlink(missing_ok=True)
    if kind == "pipe":
        os.mkfifo(path)
        unblock(path)
        return None, "a named pipe (FIFO), not a regular text file"
    if kind == "socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        return listener, "a socket, not a regular text file"
    if kind == "device":
        if not stat.S_ISCHR(os.stat("/dev/zero").st_mode):
            pytest.skip("/dev/zero is not a device here (replaced by another test run?)")
        path.symlink_to("/dev/zero")
        return None, "a character device, not a regular text file"
    path.mkdir()
    return None, "a folder, not a text file"


@pytest.mark.parametrize("kind", ["pipe", "socket", "device", "folder"])
@pytest.mark.parametrize("prefix", ["train", "tr*n"], ids=["path", "pattern"])
def test_special_files_are_refused_by_what_they_are(
    kind: str, prefix: str, tmp_path: Path, unblock_pipes: Callable[[Path], None]
) -> None:
    """A named pipe in place of a shard used to block the run before its first line (opening
    a pipe waits for a writer); named by a plain path it was "not found". Now every kind is
    named, for a path and a glob pattern alike, before anything opens it."""
    root = tmp_path / "data"
    corpus(root)
    shard = root / "train.src"
    keep, what = special(kind, shard, unblock_pipes)
    cfg = parallel(root, {**PARALLEL, "train": prefix})
    for call in (split_files, lambda cfg: split_streams(cfg, 1), lambda cfg: load_splits(cfg, 1)):
        with pytest.raises(UserError) as raised:
            call(cfg)
        assert str(raised.value) == f"data file {shard} is {what}"
    del keep


def test_a_pipe_as_a_tsv_file_is_refused(
    tmp_path: Path, unblock_pipes: Callable[[Path], None]
) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "valid.tsv").write_text("a\tx\n", encoding="utf-8")
    special("pipe", root / "train.tsv", unblock_pipes)
    cfg = DataConfig(
        name="test",
        source=DataSource.local,
        format=FileFormat.tsv,
        root=str(root),
        splits={"train": "train.tsv", "valid": "valid.tsv", "test": "valid.tsv"},
    )
    with pytest.raises(UserError, match=r"train\.tsv is a named pipe \(FIFO\)"):
        load_splits(cfg, 1)


@pytest.mark.slow
def test_a_pipe_as_a_shard_ends_train_with_one_line(
    tmp_path: Path, unblock_pipes: Callable[[Path], None]
) -> None:
    """The command line checks the data files before it makes a run directory: a pipe there
    used to block it (and SIGTERM did not end it); now it is one line and exit status 2."""
    root = tmp_path / "data"
    corpus(root)
    special("pipe", root / "train.src", unblock_pipes)
    result = attnseq_in_process(
        "train",
        "data.source=local",
        "data.format=parallel",
        "data.tokenizer=word",
        f"data.root={root}",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        "+data.splits.train=train",
        "+data.splits.valid=valid",
        "+data.splits.test=valid",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"error: data file {root / 'train.src'} is a named pipe (FIFO), not a regular text file\n"
    )
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------ line breaks
# Characters Python's str.splitlines() (and universal newlines, for "\r") takes for line breaks
# that `wc -l` does not: inside a line they are part of its text.
INNER = ["\r", "\u2028", "\x0c", "\x1c", "\x85"]


def lines(count: int, side: str) -> str:
    """`count` lines; line 10 + k holds INNER[k] in its middle; Windows line ends on the
    last 3 (their "\r" is outer whitespace)."""
    texts = [f"{side} {i}" for i in range(count)]
    for k, char in enumerate(INNER):
        texts[10 + k] = f"{side} {char} middle {10 + k}"
    ends = ["\n"] * (count - 3) + ["\r\n"] * 3
    return "".join(text + end for text, end in zip(texts, ends, strict=True))


COMPRESSORS = {"": lambda data: data, ".gz": gzip.compress, ".xz": lzma.compress}


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"], ids=["plain", "gz", "xz"])
def test_only_newline_ends_a_line_of_parallel_files(suffix: str, tmp_path: Path) -> None:
    """1,000 lines as `wc -l` counts them (a lone "\\r" used to make one of a .gz shard's lines
    two: 1,001 pairs, every later one shifted), whether read as lists or streamed."""
    root = tmp_path / "data"
    root.mkdir()
    for name in ("train", "valid"):
        for side in ("src", "tgt"):
            data = lines(1000, side).encode("utf-8")
            assert data.count(b"\n") == 1000  # what `wc -l` (and `zcat | wc -l`) says
            (root / f"{name}.{side}{suffix}").write_bytes(COMPRESSORS[suffix](data))
    cfg = parallel(root)
    loaded = load_splits(cfg, 1)["train"]
    streamed = list(split_streams(cfg, 1)["train"])
    assert loaded == streamed
    assert len(loaded) == 1000
    for k, char in enumerate(INNER):
        assert loaded[10 + k] == (f"src {char} middle {10 + k}", f"tgt {char} middle {10 + k}")
    assert loaded[-1] == ("src 999", "tgt 999")


@pytest.mark.parametrize("suffix", ["", ".gz"], ids=["plain", "gz"])
def test_only_newline_ends_a_line_of_tsv_files(suffix: str, tmp_path: Path) -> None:
    """TSV files too (they were read through a reader that split lines at "\\r", U+2028 and
    the other str.splitlines() breaks); a header of a file with Windows line ends still
    names its columns."""
    root = tmp_path / "data"
    root.mkdir()
    rows = [f"s {i}\tt {i}" for i in range(200)]
    for k, char in enumerate(INNER):
        rows[10 + k] = f"s {char} {k}\tt {k}"
    text = "de\tid\ten\r\n" + "".join(row.replace("\t", "\t0\t") + "\r\n" for row in rows)
    assert text.count("\n") == 201
    (root / f"train.tsv{suffix}").write_bytes(COMPRESSORS[suffix](text.encode("utf-8")))
    (root / "valid.tsv").write_text("de\tid\ten\nv\t0\tw\n", encoding="utf-8")
    cfg = DataConfig(
        name="test",
        source=DataSource.local,
        format=FileFormat.tsv,
        root=str(root),
        splits={"train": f"train.tsv{suffix}", "valid": "valid.tsv", "test": "valid.tsv"},
        src_field="de",
        tgt_field="en",
    )
    train = load_splits(cfg, 1)["train"]
    assert len(train) == 200
    for k, char in enumerate(INNER):
        assert train[10 + k] == (f"s {char} {k}", f"t {k}")
    assert train[-1] == ("s 199", "t 199")
