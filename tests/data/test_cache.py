"""The prepared-data cache under faults: damaged entries are found, moved aside and prepared
again; a file changed while a run reads it stops the run with one line; a full disk or a
read-only cache folder is one line with nothing half-written left."""

import dataclasses
import errno
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from helpers import attnseq_in_process

import attnseq.data.cache as cache_module
import attnseq.data.workers as workers_module
from attnseq.config.choices import DataSource, FileFormat, TokenizerKind
from attnseq.config.schema import DataConfig
from attnseq.data.cache import check_entry, describe_entries
from attnseq.data.loader import BatchLoader
from attnseq.data.mapped_split import CacheFileChanged
from attnseq.data.prepare import prepare_data
from attnseq.errors import OutputError, UserError

CHUNK = 10  # pairs per record batch: the 60 training pairs make 6 batches
WORDS = ["the", "a", "small", "big", "dog", "cat", "runs", "sleeps", "sees", "here", "now"]


def write_corpus(root: Path) -> DataConfig:
    """Word pairs as parallel files: train 60, valid and test 5 each (distinct texts)."""
    root.mkdir(parents=True, exist_ok=True)
    sizes = {"train": 60, "valid": 5, "test": 5}
    offset = 0
    for name, size in sizes.items():
        src = [
            " ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 5))
            for i in range(offset, offset + size)
        ]
        tgt = [f"{line} ." for line in src]
        offset += size
        (root / f"{name}.src").write_text("".join(f"{s}\n" for s in src), encoding="utf-8")
        (root / f"{name}.tgt").write_text("".join(f"{t}\n" for t in tgt), encoding="utf-8")
    return DataConfig(
        name="toy",
        source=DataSource.local,
        format=FileFormat.parallel,
        root=str(root),
        splits={name: name for name in sizes},
        src_lang="src",
        tgt_lang="tgt",
        tokenizer=TokenizerKind.word,
        prepare_workers=1,
    )


@pytest.fixture
def cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """conftest.py's private cache, its encoding in chunks of CHUNK examples."""
    monkeypatch.setattr(workers_module, "ENCODE_CHUNK", CHUNK)
    return cache


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings (and worse) the test logged: an earlier test in the same process may have
    left the attnseq logger at INFO, which caplog then records too."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def corpus(tmp_path: Path, cache: Path) -> DataConfig:
    return write_corpus(tmp_path / "data")


def entry_of(cache: Path) -> Path:
    (entry,) = [path for path in (cache / "prepared").iterdir() if "." not in path.name]
    return entry


def writable(path: Path) -> Path:
    """The cache's files are read-only (0444): tests that damage one make it writable."""
    path.chmod(0o644)
    return path


def moved_aside(cache: Path) -> list[Path]:
    return sorted((cache / "prepared").glob("*.damaged-*"))


def rows(data: Any) -> dict[str, int]:
    return {name: len(examples) for name, examples in data.examples.items()}


# ------------------------------------------------------------------------ damaged entries
def cut_at_batch_boundary(path: Path, batches: int) -> int:
    """Cut an Arrow stream after its first `batches` record batches (a valid, shorter
    stream: what a copy cut short or a full disk can leave). The cut's offset is where the
    same schema and batches end when written alone (without the end-of-stream marker)."""
    table = pa.ipc.open_stream(pa.memory_map(str(path)).read_buffer()).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches()[:batches]:
            writer.write_batch(batch)
    prefix = sink.getvalue().to_pybytes()[:-8]  # the end-of-stream marker is 8 bytes
    assert path.read_bytes().startswith(prefix)
    os.truncate(writable(path), len(prefix))
    return table.num_rows


def test_a_file_cut_at_a_batch_boundary_is_found_and_prepared_again(
    corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Cut at a record-batch boundary, the file is a valid shorter stream: Arrow reads 40 of
    the 60 rows without complaint. The size recorded in meta.json catches it before it is
    mapped; the entry is moved aside and the corpus prepared again, whole."""
    first = prepare_data(corpus, seed=1)
    assert rows(first) == {"train": 60, "valid": 5, "test": 5}
    assert len(first.examples["train"].src._offsets) == 6  # record batches
    train_file = entry_of(cache) / "splits" / "train.arrow"
    del first
    assert cut_at_batch_boundary(train_file, 4) == 60
    shorter = pa.ipc.open_stream(pa.memory_map(str(train_file)).read_buffer()).read_all()
    assert shorter.num_rows == 40  # what a run used to train on, silently

    with caplog.at_level(logging.WARNING, logger="attnseq"):
        again = prepare_data(corpus, seed=1)
    assert rows(again) == {"train": 60, "valid": 5, "test": 5}
    (warning,) = warnings_in(caplog)
    assert "is damaged (splits/train.arrow holds" in warning
    assert "meta.json says" in warning and "moved aside" in warning
    (aside,) = moved_aside(cache)
    assert aside.name.startswith(entry_of(cache).name + ".damaged-")
    assert (aside / "splits" / "train.arrow").stat().st_size < train_file.stat().st_size


@pytest.mark.parametrize("damage", ["mid batch", "broken meta.json", "missing file", "rows"])
def test_a_damaged_entry_is_moved_aside_once_and_rebuilt(
    damage: str, corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each damage: one warning naming it, the entry moved aside, the data prepared again;
    the next run maps the new entry with no warning (the damage does not come back)."""
    prepare_data(corpus, seed=1)
    entry = entry_of(cache)
    train_file = entry / "splits" / "train.arrow"
    meta_file = entry / "meta.json"
    if damage == "mid batch":
        os.truncate(writable(train_file), train_file.stat().st_size - 100)
        expected = "splits/train.arrow holds"
    elif damage == "broken meta.json":
        writable(meta_file).write_text('{"version": ', encoding="utf-8")
        expected = "meta.json is not valid JSON"
    elif damage == "missing file":
        train_file.unlink()
        expected = "splits/train.arrow is missing"
    else:  # meta.json consistent in itself but not with the file
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        meta["files"]["train"]["rows"] = 70
        writable(meta_file).write_text(json.dumps(meta), encoding="utf-8")
        expected = "holds 60 rows in 6 record batches, meta.json says 70 in 6"

    with caplog.at_level(logging.WARNING, logger="attnseq"):
        again = prepare_data(corpus, seed=1)
    assert rows(again) == {"train": 60, "valid": 5, "test": 5}
    messages = warnings_in(caplog)
    assert len(messages) == 1 and expected in messages[0], messages
    assert len(moved_aside(cache)) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        assert rows(prepare_data(corpus, seed=1))["train"] == 60
    assert not warnings_in(caplog)
    assert len(moved_aside(cache)) == 1


def test_a_damaged_entry_that_cannot_be_moved_aside_says_to_delete_it(
    corpus: DataConfig, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare_data(corpus, seed=1)
    entry = entry_of(cache)
    writable(entry / "meta.json").write_text("{", encoding="utf-8")
    real_rename = os.rename

    def refuse(source: Any, target: Any) -> None:
        if Path(source) == entry:
            raise PermissionError(errno.EACCES, "Permission denied")
        real_rename(source, target)

    monkeypatch.setattr(cache_module.os, "rename", refuse)
    with pytest.raises(UserError, match="damaged .*cannot be moved aside .*delete that folder"):
        prepare_data(corpus, seed=1)


def ids_offset(path: Path) -> int:
    """The byte offset in an Arrow stream file of the first source id of its first batch."""
    mapped = pa.memory_map(str(path))
    buffer = mapped.read_buffer()
    table = pa.ipc.open_stream(buffer).read_all()
    values = table.column("src_ids").chunk(0).values
    return values.buffers()[1].address + 4 * values.offset - buffer.address


def test_ids_outside_the_vocabulary_are_found_without_the_checksum(
    corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One id rewritten in place (same size, same rows): it would index past the embedding
    table (IndexError deep in training). The ids' range is checked whenever an entry is
    mapped: the entry is moved aside and prepared again."""
    first = prepare_data(corpus, seed=1)
    vocab = first.tokenizers.src.vocab_size
    del first
    train_file = writable(entry_of(cache) / "splits" / "train.arrow")
    offset = ids_offset(train_file)
    with train_file.open("r+b") as handle:
        handle.seek(offset)
        handle.write(np.int32(100_000).tobytes())
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        again = prepare_data(corpus, seed=1)
    (warning,) = warnings_in(caplog)
    assert f"holds src ids 4..100000, outside the vocabulary of {vocab}" in warning
    assert max(max(src) for src, _ in again.examples["train"]) < vocab


@pytest.mark.slow
def test_the_checksum_finds_a_changed_text_when_asked(
    corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A changed byte of a text leaves sizes, rows and ids as they were: the cheap checks of
    every run pass it; data.verify and `attnseq doctor --verify-cache` compare checksums and
    find it."""
    prepare_data(corpus, seed=1)
    entry = entry_of(cache)
    train_file = writable(entry / "splits" / "train.arrow")
    content = bytearray(train_file.read_bytes())
    at = content.index(b"small")
    content[at] = ord("S")
    train_file.write_bytes(bytes(content))
    assert check_entry(entry, verify=False) is None
    assert check_entry(entry, verify=True) == (
        "splits/train.arrow differs from the file written (its checksum)"
    )
    doctor = attnseq_in_process("doctor", "--verify-cache", cwd=tmp_path)
    assert doctor.returncode == 1
    assert f"{entry.name}: damaged: splits/train.arrow differs" in doctor.stdout
    assert doctor.stderr.startswith("error: 1 damaged cache entry: delete it")

    with caplog.at_level(logging.WARNING, logger="attnseq"):
        unverified = prepare_data(corpus, seed=1)
    assert not warnings_in(caplog)
    assert any("Small" in src for src, _ in unverified.pairs["train"])
    del unverified
    verified = dataclasses.replace(corpus, verify=True)
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        rebuilt = prepare_data(verified, seed=1)
    (warning,) = warnings_in(caplog)
    assert "differs from the file written (its checksum)" in warning
    assert not any("Small" in src for src, _ in rebuilt.pairs["train"])
    assert attnseq_in_process("doctor", "--verify-cache", cwd=tmp_path).returncode == 0


def test_every_folder_of_the_cache_is_described(corpus: DataConfig, cache: Path) -> None:
    """What `attnseq doctor --verify-cache` lists: entries checked in full, entries of an
    older layout (unused, not damaged), builds in progress or left by a process that is gone,
    entries moved aside."""
    prepare_data(corpus, seed=1)
    prepared = cache / "prepared"
    entry = entry_of(cache)
    old = prepared / "0123abcd"
    (old / "splits").mkdir(parents=True)
    (old / "meta.json").write_text('{"version": 4}', encoding="utf-8")
    host = socket.gethostname()
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()
    running, gone_pid = str(os.getpid()), str(ended.pid)
    (prepared / f"k.tmp-{running}@{host}.x").mkdir()
    (prepared / f"k.tmp-{gone_pid}@{host}.y").mkdir()
    (prepared / "k.damaged-20250101T000000-1").mkdir()
    size = sum(path.stat().st_size for path in (entry / "splits").iterdir())
    described = {name: (verdict, damaged) for name, verdict, damaged in describe_entries(prepared)}
    assert described == {
        "0123abcd": ("layout 4, another attnseq version's: unused here", False),
        entry.name: (
            f"ok (checksums match): train 60, valid 5, test 5 rows, {size:,} bytes",
            False,
        ),
        f"k.tmp-{running}@{host}.x": (f"unfinished build of process {running} (running)", False),
        f"k.tmp-{gone_pid}@{host}.y": (
            f"unfinished build of process {gone_pid} (gone: the next preparation removes it)",
            False,
        ),
        "k.damaged-20250101T000000-1": (
            "moved aside as damaged: never read again, delete it",
            False,
        ),
    }


def test_entries_are_read_only_and_record_what_is_checked(corpus: DataConfig, cache: Path) -> None:
    data = prepare_data(corpus, seed=1)
    entry = entry_of(cache)
    files = [entry / "meta.json", *sorted((entry / "splits").iterdir())]
    umask = os.umask(0o022)
    os.umask(umask)
    assert [oct(path.stat().st_mode & 0o777) for path in files] == [oct(0o444 & ~umask)] * 4
    meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
    train = meta["files"]["train"]
    assert train["rows"] == 60 and train["batches"] == 6
    assert train["bytes"] == (entry / "splits" / "train.arrow").stat().st_size
    ids = [i for src, _ in data.examples["train"] for i in src]
    assert train["src_ids"] == [min(ids), max(ids)]
    assert len(train["blake2b"]) == 64


# ------------------------------------------------------------------ what built an entry
@pytest.mark.slow
def test_a_tokenizer_swapped_for_another_entrys_is_found(
    corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Entries of two corpora of the same words, each word as often as another is in the
    other: word vocabularies of the same size in another order. The first entry given the
    second's tokenizers (their digests too) keeps sizes, rows, ids within the vocabulary and
    checksums: its texts, encoded again, give other ids. Found by every run, by data.verify
    and by doctor --verify-cache; moved aside and prepared again."""
    other = write_corpus(tmp_path / "other")
    swap = dict(zip(WORDS, reversed(WORDS), strict=True))
    for path in Path(other.root).iterdir():
        text = path.read_text(encoding="utf-8")
        path.write_text(
            "\n".join(" ".join(swap.get(w, w) for w in line.split()) for line in text.split("\n")),
            encoding="utf-8",
        )
    first, second = prepare_data(corpus, seed=1), prepare_data(other, seed=1)
    assert first.tokenizers.src.vocab_size == second.tokenizers.src.vocab_size
    assert first.tokenizers.src.state_dict() != second.tokenizers.src.state_dict()
    entry, donor = first.cache_folder, second.cache_folder
    assert entry is not None and donor is not None
    del first, second
    meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
    theirs = json.loads((donor / "meta.json").read_text(encoding="utf-8"))
    for key in ("tokenizers", "tokenizer_digests"):
        meta[key] = theirs.get(key, meta.get(key))
    writable(entry / "meta.json").write_text(json.dumps(meta), encoding="utf-8")

    problem = check_entry(entry, verify=True)
    assert problem is not None and "tokenizer makes of its text" in problem, problem
    doctor = attnseq_in_process("doctor", "--verify-cache", cwd=tmp_path)
    assert doctor.returncode == 1 and f"{entry.name}: damaged: " in doctor.stdout
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        again = prepare_data(dataclasses.replace(corpus, verify=True), seed=1)
    (warning,) = warnings_in(caplog)
    assert "tokenizers are not the ones that built it" in warning and "moved aside" in warning
    src, _ = again.pairs["train"][0]
    assert again.examples["train"][0][0] == again.tokenizers.src.encode(src)


def test_a_tokenizer_changed_without_its_digest_is_found(
    corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prepare_data(corpus, seed=1)
    entry = entry_of(cache)
    meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
    tokens = meta["tokenizers"]["tgt"]["tokens"]
    tokens[-1], tokens[-2] = tokens[-2], tokens[-1]  # two words trade ids
    writable(entry / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert check_entry(entry, verify=False) == (
        "meta.json's tgt tokenizer is not the one the entry was built with (its digest differs "
        "from the recorded one)"
    )
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        assert rows(prepare_data(corpus, seed=1))["train"] == 60
    assert len(warnings_in(caplog)) == 1 and len(moved_aside(cache)) == 1


def test_an_entry_linked_under_another_key_is_not_used(
    corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The entry of data.max_examples=50, replaced by a symbolic link to the entry of 30: a
    run of 50 would train on 30. The link is moved aside (what it points to stays whole) and
    the 50 are prepared again."""
    small, large = (dataclasses.replace(corpus, max_examples=n) for n in (30, 50))
    small_entry = prepare_data(small, seed=1).cache_folder
    large_entry = prepare_data(large, seed=1).cache_folder
    assert small_entry is not None and large_entry is not None
    for path in sorted(large_entry.rglob("*"), reverse=True):
        writable(path)
    shutil.rmtree(large_entry)
    large_entry.symlink_to(small_entry.name)
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        data = prepare_data(large, seed=1)
    assert rows(data)["train"] == 50
    (warning,) = warnings_in(caplog)
    assert f"(a symbolic link to {small_entry.name}): settings.max_examples differ" in warning
    (aside,) = moved_aside(cache)
    assert aside.is_symlink() and os.readlink(aside) == small_entry.name
    assert not large_entry.is_symlink()
    assert check_entry(small_entry) is None and rows(prepare_data(small, seed=1))["train"] == 30


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("no test split", "meta.json lists the splits train, valid; the entry was built with"),
        ("a list", "meta.json holds an array, not a JSON object"),
        ("files a list", "meta.json's files is an array, not an object"),
        ("rows a string", "meta.json's files.train.rows is a string, not a number"),
        ("a pipe for train", "splits/train.arrow is a named pipe (FIFO), not a file"),
        ("a folder for train", "splits/train.arrow is a folder, not a file"),
        ("a pipe for meta.json", "meta.json is a named pipe (FIFO), not a file"),
    ],
)
def test_damaged_meta_and_files_that_are_no_files_are_named_as_what_they_are(
    damage: str, expected: str, corpus: DataConfig, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each is damage like any other: one warning saying what it is, the entry moved aside
    and every split prepared again (a meta.json without the test split gave a KeyError in
    training; `[]` a message about list indices; a pipe or folder "holds 0 bytes")."""
    prepare_data(corpus, seed=1)
    entry = entry_of(cache)
    meta_file, train_file = entry / "meta.json", entry / "splits" / "train.arrow"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if damage == "no test split":
        meta["splits"].remove("test")
    elif damage == "a list":
        meta = []
    elif damage == "files a list":
        meta["files"] = list(meta["files"].values())
    elif damage == "rows a string":
        meta["files"]["train"]["rows"] = "60"
    if damage.startswith("a pipe for") or damage.startswith("a folder"):
        target = meta_file if damage.endswith("meta.json") else train_file
        writable(entry / "splits").chmod(0o755)
        target.unlink()
        if "pipe" in damage:
            os.mkfifo(target)
        else:
            target.mkdir()
    else:
        writable(meta_file).write_text(json.dumps(meta), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="attnseq"):
        again = prepare_data(corpus, seed=1)
    assert rows(again) == {"train": 60, "valid": 5, "test": 5}
    (warning,) = warnings_in(caplog)
    assert expected in warning and "moved aside" in warning, warning


def test_a_cache_folder_that_cannot_be_one_is_one_user_error(
    corpus: DataConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = {
        "file": "the cache folder {} is a regular file, not a folder",
        "loop": "the cache folder {} cannot be looked at (Too many levels of symbolic links)",
        "file/sub": "the cache folder {} cannot be looked at (Not a directory)",
        "dangling": "the cache folder {} is a symbolic link to ",
    }
    for name, message in cases.items():
        monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / name))
        with pytest.raises(UserError, match="^" + re.escape(message.format(tmp_path / name))):
            prepare_data(corpus, seed=1)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "prepared").write_text("x", encoding="utf-8")
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError, match="prepared is a regular file, not a folder; point the"):
        prepare_data(corpus, seed=1)


# ------------------------------------------------------------------------ changed under a run
def test_a_file_changed_between_epochs_stops_the_run(corpus: DataConfig, cache: Path) -> None:
    """The loader compares the mapped file with what it was at every epoch's start."""
    data = prepare_data(corpus, seed=1)
    loader = BatchLoader(
        data.examples["train"], pad_id=0, bos_id=2, eos_id=3, device=torch.device("cpu")
    )
    batches = [list(range(i, i + 8)) for i in range(0, 56, 8)]
    assert len(list(loader(batches, epoch=0))) == 7
    train_file = writable(entry_of(cache) / "splits" / "train.arrow")
    with train_file.open("ab") as handle:  # grown, not cut: no page of the mapping is lost
        handle.write(b"\0" * 64)
    with pytest.raises(
        CacheFileChanged, match=r"train\.arrow was rewritten .* while this run read"
    ):
        next(loader(batches, epoch=1))


READER = """
import os, signal, sys
from pathlib import Path
import attnseq.data.prepare as prepare
from attnseq.config.schema import DataConfig
from attnseq.config.choices import DataSource, FileFormat, TokenizerKind

cfg = DataConfig(**{config})
data = prepare.prepare_data(cfg, seed=1)
examples = data.examples["train"]
everything = list(range(len(examples)))
print("mapped", flush=True)
sys.stdin.readline()  # the test has changed the file (or not)
if {kill_self}:
    os.kill(os.getpid(), signal.SIGBUS)  # one that no mapped file explains
while True:
    examples.take(everything)
"""


def reader_process(corpus: DataConfig, kill_self: bool) -> subprocess.Popen:
    fields = {
        "name": "'toy'",
        "source": "DataSource.local",
        "format": "FileFormat.parallel",
        "root": repr(corpus.root),
        "splits": repr(corpus.splits),
        "src_lang": "'src'",
        "tgt_lang": "'tgt'",
        "tokenizer": "TokenizerKind.word",
    }
    config = ", ".join(f"'{key}': {value}" for key, value in fields.items())
    script = READER.format(config="{" + config + "}", kill_self=kill_self)
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "mapped\n", process.communicate()[1]
    return process


@pytest.mark.slow
def test_a_file_truncated_while_it_is_read_is_one_line_and_exit_2(
    corpus: DataConfig, cache: Path
) -> None:
    """Reading a page of a memory-mapped file past its new end faults (SIGBUS): without a
    handler the process dies with status 135 and no word. Here: one line, exit status 2."""
    prepare_data(corpus, seed=1)  # prepared here, read by the child from the cache
    train_file = writable(entry_of(cache) / "splits" / "train.arrow")
    size = train_file.stat().st_size
    process = reader_process(corpus, kill_self=False)
    os.truncate(train_file, 0)
    _, err = process.communicate("go\n", timeout=60)
    assert process.returncode == 2, err
    assert err == (
        f"error: the data cache file {train_file} was truncated to 0 bytes (it held {size}) "
        "while this run read it: another process changed the cache; the next run checks the "
        "entry and prepares the data again if it is damaged\n"
    )


def test_a_file_truncated_under_a_dataloader_worker_is_one_error(
    corpus: DataConfig, cache: Path
) -> None:
    """With DataLoader workers the fault happens in a worker, which ends without a word; the
    loader then reports the changed file instead of DataLoader's lost worker (a reset
    connection or "worker exited unexpectedly"). This process never reads the file again."""
    data = prepare_data(corpus, seed=1)
    loader = BatchLoader(
        data.examples["train"],
        pad_id=0,
        bos_id=2,
        eos_id=3,
        device=torch.device("cpu"),
        num_workers=1,
    )
    train_file = writable(entry_of(cache) / "splits" / "train.arrow")
    batches = loader([[i] for i in range(60)], epoch=0)
    next(batches)
    os.truncate(train_file, 0)
    with pytest.raises(CacheFileChanged, match=r"train\.arrow was truncated to 0 bytes"):
        for _ in batches:
            pass


@pytest.mark.slow
def test_a_bus_error_no_mapped_file_explains_is_left_alone(corpus: DataConfig, cache: Path) -> None:
    """The handler answers only for a watched file that shrank: any other SIGBUS ends the
    process as it would have (killed by the signal), without the cache's message."""
    prepare_data(corpus, seed=1)
    process = reader_process(corpus, kill_self=True)
    _, err = process.communicate("go\n", timeout=60)
    assert process.returncode == -signal.SIGBUS, err
    assert "data cache" not in err


# ------------------------------------------------------------------------ full disk, read-only
class FullDiskWriter:
    """An Arrow stream writer on a full disk: every batch fails as the real one does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> "FullDiskWriter":
        return self

    def __exit__(self, *args: Any) -> None:
        pass

    def write_batch(self, batch: pa.RecordBatch) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("failure", ["disk full", "read-only"])
def test_a_cache_that_cannot_be_written_is_one_line_and_nothing_is_left(
    failure: str, corpus: DataConfig, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if failure == "disk full":
        monkeypatch.setattr(cache_module.pa.ipc, "new_stream", FullDiskWriter)
        reason = "No space left on device"
    else:

        def read_only(*args: Any, **kwargs: Any) -> str:
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr(cache_module.tempfile, "mkdtemp", read_only)
        reason = "Read-only file system"
    with pytest.raises(OutputError) as raised:
        prepare_data(corpus, seed=1)
    assert str(raised.value) == (
        f"cannot write the data cache in {cache / 'prepared'}: {reason} (nothing was kept); "
        "free space there, or point the ATTNSEQ_CACHE environment variable at a folder with "
        "room that can be written"
    )
    assert list((cache / "prepared").iterdir()) == []


@pytest.mark.slow
def test_a_full_disk_during_preparation_is_exit_2_from_the_command_line(
    corpus: DataConfig, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module.pa.ipc, "new_stream", FullDiskWriter)
    result = attnseq_in_process(
        "train",
        "data.source=local",
        "data.format=parallel",
        "data.tokenizer=word",
        f"data.root={corpus.root}",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        "+data.splits.train=train",
        "+data.splits.valid=valid",
        "+data.splits.test=test",
        "trainer.device=cpu",
        "trainer.threads=1",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: cannot write the data cache in ")
    assert list((cache / "prepared").iterdir()) == []
