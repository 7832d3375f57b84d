"""Loading text pairs: every source kind and format, held-out splits, and clear user errors.

Real-data tests copy the first lines of ../shared/data into tmp_path (fast, and the layout under
the data root stays the same); the rest write their own small files.
"""

import json
import random
import re
from pathlib import Path
from typing import Any

import datasets
import pytest

from attnseq.config.choices import DataSource, FileFormat
from attnseq.config.schema import DataConfig
from attnseq.data.generated import make_splits
from attnseq.data.locations import cache_root, data_root
from attnseq.data.sources import (
    HOLDOUT_FRACTION,
    hold_out,
    load_pairs_from_path,
    load_splits,
)
from attnseq.errors import UserError

N_LINES = 200


pytestmark = pytest.mark.usefixtures("cache")  # conftest.py's: a cache of its own


def copy_head(shared: Path, relative: str, root: Path, lines: int = N_LINES) -> Path:
    """The first `lines` lines of shared/RELATIVE, written to root/RELATIVE."""
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    with (shared / relative).open(encoding="utf-8") as source:
        head = [next(source) for _ in range(lines)]
    target.write_text("".join(head), encoding="utf-8")
    return target


def local(root: Path, fmt: FileFormat, splits: dict[str, str], **fields: Any) -> DataConfig:
    return DataConfig(
        name="test", source=DataSource.local, format=fmt, root=str(root), splits=splits, **fields
    )


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- real slices
def test_parallel_multi30k_slice(shared_data: Path, tmp_path: Path) -> None:
    for split in ("train", "val"):
        for lang in ("de", "en"):
            copy_head(shared_data, f"multi30k/{split}.{lang}", tmp_path)
    cfg = local(
        tmp_path,
        FileFormat.parallel,
        {"train": "multi30k/train", "valid": "multi30k/val", "test": "multi30k/val"},
        src_lang="de",
        tgt_lang="en",
    )
    splits = load_splits(cfg, seed=1)
    assert list(splits) == ["train", "valid", "test"]
    assert [len(pairs) for pairs in splits.values()] == [N_LINES] * 3
    de = (tmp_path / "multi30k/train.de").read_text(encoding="utf-8").splitlines()
    en = (tmp_path / "multi30k/train.en").read_text(encoding="utf-8").splitlines()
    assert splits["train"] == [(s.strip(), t.strip()) for s, t in zip(de, en, strict=True)]
    assert load_splits(cfg, seed=1, splits=["valid"]) == {"valid": splits["valid"]}


def test_tsv_tatoeba_slice_keeps_quotes(shared_data: Path, tmp_path: Path) -> None:
    # The file's first lines have no quotes: add the first lines that do.
    path = copy_head(shared_data, "tatoeba/eng-fra.txt", tmp_path)
    with (shared_data / "tatoeba/eng-fra.txt").open(encoding="utf-8") as source:
        quoted = [line for line in source if '"' in line][:5]
    with path.open("a", encoding="utf-8") as out:
        out.writelines(quoted)
    cfg = local(tmp_path, FileFormat.tsv, {"train": "tatoeba/eng-fra.txt"}, src_field="0")
    pairs = load_pairs_from_path("tatoeba/eng-fra.txt", cfg)
    assert len(pairs) == N_LINES + len(quoted)
    assert pairs[0] == ("Go.", "Va !")
    expected = [tuple(field.strip() for field in line.rstrip("\n").split("\t")) for line in quoted]
    assert pairs[N_LINES:] == expected
    assert any(src.startswith('"') or '"' in tgt for src, tgt in pairs[N_LINES:])


def test_tatoeba_held_out_splits(shared_data: Path, tmp_path: Path) -> None:
    copy_head(shared_data, "tatoeba/eng-fra.txt", tmp_path)
    cfg = local(tmp_path, FileFormat.tsv, {"train": "tatoeba/eng-fra.txt"})
    splits = load_splits(cfg, seed=1)
    sources = {name: {src for src, _ in pairs} for name, pairs in splits.items()}
    assert sum(len(pairs) for pairs in splits.values()) == N_LINES
    distinct = len(set().union(*sources.values()))
    expected = max(1, round(HOLDOUT_FRACTION * distinct))
    assert len(sources["valid"]) == len(sources["test"]) == expected
    # Grouped by source: a sentence with several translations sits on one side only.
    assert not sources["train"] & sources["valid"]
    assert not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]
    # The same for any run seed.
    assert load_splits(cfg, seed=99) == splits


def test_hold_out_ignores_order_and_scales() -> None:
    pairs = [(f"sentence {i}", f"phrase {i}") for i in range(1000)] + [("sentence 1", "autre")]
    train, held = hold_out(pairs, ["valid", "test"])
    shuffled = pairs[:]
    random.Random(0).shuffle(shuffled)
    _, held_shuffled = hold_out(shuffled, ["valid", "test"])
    for name in ("valid", "test"):
        assert sorted(held[name]) == sorted(held_shuffled[name])
        assert len({src for src, _ in held[name]}) == 10  # 1% of 1000 distinct sources
    assert len(train) + len(held["valid"]) + len(held["test"]) == len(pairs)
    with pytest.raises(UserError, match="cannot hold out"):
        hold_out([("a", "b"), ("a", "c")], ["valid", "test"])


def test_jsonl_aeslc_slice(shared_data: Path, tmp_path: Path) -> None:
    copy_head(shared_data, "aeslc/train.jsonl", tmp_path)
    file = "aeslc/train.jsonl"
    cfg = local(tmp_path, FileFormat.jsonl, {"train": file, "valid": file, "test": file})
    train = load_splits(cfg, seed=1, splits=["train"])["train"]
    # split("\n"), not splitlines(): JSON strings may hold a raw U+2028, which is not a record end
    text = (tmp_path / file).read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.split("\n") if line]
    assert train == [(r["src"].strip(), r["tgt"].strip()) for r in records]
    assert any("\n" in src for src, _ in train)  # inner newlines are kept
    cfg.tgt_field = "refs"  # a list, not text
    with pytest.raises(UserError, match=r"line 1 field 'refs' \(data.tgt_field\) holds .* array"):
        load_splits(cfg, seed=1, splits=["train"])
    cfg.tgt_field = "subject"
    with pytest.raises(UserError, match="no field 'subject'.*src, tgt"):
        load_splits(cfg, seed=1, splits=["train"])


# ----------------------------------------------------------------------------- written files
def test_jsonl_dotted_fields(tmp_path: Path) -> None:
    lines = [
        {"id": 1, "translation": {"de": " Ein Hund. ", "en": "A dog."}},
        {"id": 2, "translation": {"de": "Zwei Katzen.", "en": "Two cats."}},
    ]
    write(tmp_path / "t.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    cfg = local(
        tmp_path,
        FileFormat.jsonl,
        {"train": "t.jsonl", "valid": "t.jsonl", "test": "t.jsonl"},
        src_field="translation.de",
        tgt_field="translation.en",
    )
    assert load_splits(cfg, 1, ["train"])["train"] == [
        ("Ein Hund.", "A dog."),
        ("Zwei Katzen.", "Two cats."),
    ]


@pytest.mark.parametrize(
    ("records", "line", "field", "kind"),
    [
        # mixed types in one field: Arrow keeps it as JSON text, which must not pass as text
        (['{"src": "a", "tgt": "b"}', '{"src": "c", "tgt": ["a", "b"]}'], 2, "tgt", "array"),
        (['{"src": "a", "tgt": "b"}', '{"src": "c", "tgt": 5}'], 2, "tgt", "number"),
        (['{"src": "a", "tgt": true}'], 1, "tgt", "boolean"),
        (['{"src": "a", "tgt": "b"}', '{"src": {"x": "y"}, "tgt": "c"}'], 2, "src", "object"),
        (['{"src": 1.5, "tgt": 2}'], 1, "src", "number"),  # the whole column numbers
        (['{"src": ["a"], "tgt": "b"}'], 1, "src", "array"),
        # a blank line before the bad record: the message names the file's line
        (['{"src": "a", "tgt": "b"}', "", '{"src": "c", "tgt": ["x"]}'], 3, "tgt", "array"),
        (['{"src": "a", "tgt": "b"}', "", '{"src": "c", "tgt": 7}'], 3, "tgt", "number"),
    ],
)
def test_jsonl_fields_must_hold_strings(
    tmp_path: Path, records: list[str], line: int, field: str, kind: str
) -> None:
    write(tmp_path / "t.jsonl", "\n".join(records) + "\n")
    cfg = local(tmp_path, FileFormat.jsonl, {"train": "t.jsonl"})
    with pytest.raises(UserError) as error:
        load_splits(cfg, 1, ["train"])
    message = str(error.value)
    assert f"t.jsonl: line {line} field {field!r} (data.{field}_field) holds a JSON {kind}" in (
        message
    )
    assert "\n" not in message


def test_jsonl_texts_stay_as_written(tmp_path: Path) -> None:
    """Arrow types "1998-03-03" as a timestamp; the text is what the file says."""
    records = ['{"src": "3 March 1998", "tgt": "1998-03-03"}', "", '{"src": "x", "tgt": "12:30"}']
    write(tmp_path / "d.jsonl", "\n".join(records) + "\n")
    cfg = local(tmp_path, FileFormat.jsonl, {})
    expected = [("3 March 1998", "1998-03-03"), ("x", "12:30")]
    assert load_pairs_from_path("d.jsonl", cfg) == expected


def test_jsonl_nested_field_types_and_missing_values(tmp_path: Path) -> None:
    records = [
        {"translation": {"de": "Hund", "en": "dog"}},
        {"translation": {"de": "Katze", "en": ["cat"]}},
    ]
    write(tmp_path / "n.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    fields = {"src_field": "translation.de", "tgt_field": "translation.en"}
    cfg = local(tmp_path, FileFormat.jsonl, {"train": "n.jsonl"}, **fields)
    with pytest.raises(UserError, match=r"line 2 field 'translation.en' .* JSON array"):
        load_splits(cfg, 1, ["train"])
    # null and a missing field are empty texts (empty examples: dropped from train, counted)
    missing = '{"src": "a", "tgt": null}\n{"src": "b"}\n{"src": "c", "tgt": "d"}\n'
    write(tmp_path / "m.jsonl", missing)
    cfg = local(tmp_path, FileFormat.jsonl, {})
    assert load_pairs_from_path("m.jsonl", cfg) == [("a", ""), ("b", ""), ("c", "d")]


def test_tsv_header_names_and_bad_lines(tmp_path: Path) -> None:
    write(tmp_path / "h.tsv", 'id\ten\tfr\n1\tHi "there"\tSalut\n2\tBye\tAu revoir\n')
    files = {"train": "h.tsv", "valid": "h.tsv", "test": "h.tsv"}
    cfg = local(tmp_path, FileFormat.tsv, files, src_field="en", tgt_field="fr")
    assert load_splits(cfg, 1, ["train"])["train"] == [
        ('Hi "there"', "Salut"),
        ("Bye", "Au revoir"),
    ]
    write(tmp_path / "short.tsv", "a\tb\nonly one column\n")
    cfg = local(tmp_path, FileFormat.tsv, {"train": "short.tsv"})
    with pytest.raises(UserError, match=r"short\.tsv: line 2 has 1 TAB-separated column"):
        load_pairs_from_path("short.tsv", cfg)


def test_parallel_line_counts_must_agree(tmp_path: Path) -> None:
    write(tmp_path / "c/train.de", "a\nb\nc\n")
    write(tmp_path / "c/train.en", "x\ny\n")
    cfg = local(tmp_path, FileFormat.parallel, {"train": "c/train"}, src_lang="de", tgt_lang="en")
    with pytest.raises(UserError) as error:
        load_splits(cfg, 1, ["train"])
    message = str(error.value)
    assert "train.de has 3 lines" in message and "train.en has 2" in message


@pytest.mark.parametrize("fmt", [FileFormat.parallel, FileFormat.jsonl, FileFormat.tsv])
def test_invalid_utf8_names_file_and_line(tmp_path: Path, fmt: FileFormat) -> None:
    bad = b'{"src": "caf\xe9", "tgt": "x"}' if fmt is FileFormat.jsonl else b"caf\xe9\tx"
    good = b'{"src": "ok", "tgt": "y"}' if fmt is FileFormat.jsonl else b"ok\ty"
    name = {"parallel": "p.de", "jsonl": "p.jsonl", "tsv": "p.tsv"}[fmt.name]
    write(tmp_path / name, good + b"\n" + good + b"\n" + bad + b"\n")
    write(tmp_path / "p.en", "1\n2\n3\n")
    split = "p" if fmt is FileFormat.parallel else name
    cfg = local(tmp_path, fmt, {"train": split}, src_lang="de", tgt_lang="en")
    with pytest.raises(UserError, match=rf"{name}: line 3 is not valid UTF-8"):
        load_splits(cfg, 1, ["train"])


def test_invalid_json_names_line(tmp_path: Path) -> None:
    write(tmp_path / "j.jsonl", '{"src": "a", "tgt": "b"}\n{"src": "a", oops}\n')
    cfg = local(tmp_path, FileFormat.jsonl, {"train": "j.jsonl"})
    with pytest.raises(UserError, match=r"j\.jsonl: line 2 is not valid JSON"):
        load_splits(cfg, 1, ["train"])


def test_missing_files_say_what_was_expected(tmp_path: Path) -> None:
    cfg = local(
        tmp_path, FileFormat.parallel, {"train": "nope/train"}, src_lang="de", tgt_lang="en"
    )
    with pytest.raises(UserError) as error:
        load_splits(cfg, 1)
    message = str(error.value)
    assert str(tmp_path / "nope" / "train.de") in message
    assert "parallel text files train.de and train.en" in message
    # what a wheel user has (no data/README.md): the key to set, doctor, the docs' Data page
    assert "set data.root=DIR (or $ATTNSEQ_DATA)" in message
    assert "`attnseq doctor` lists the files" in message and "Data page" in message
    assert "README" not in message
    cfg = local(tmp_path, FileFormat.jsonl, {"train": "x.jsonl"})
    with pytest.raises(UserError, match=r"x\.jsonl; expected a jsonl file"):
        load_splits(cfg, 1)
    with pytest.raises(UserError, match="no data at missing"):
        load_pairs_from_path("missing", cfg)
    with pytest.raises(UserError, match="unknown split 'dev'"):
        load_splits(cfg, 1, ["dev"])


def test_load_pairs_from_path_detects_the_format(tmp_path: Path) -> None:
    write(tmp_path / "e/set.fr", "Bonjour\n")
    write(tmp_path / "e/set.en", "Hello\n")
    write(tmp_path / "e/set.jsonl", '{"src": "Bonjour", "tgt": "Hello"}\n')
    write(tmp_path / "e/set.tsv", "Bonjour\tHello\n")
    cfg = local(tmp_path, FileFormat.parallel, {}, src_lang="fr", tgt_lang="en")
    for path in ("e/set", "e/set.jsonl", "e/set.tsv", str(tmp_path / "e/set.tsv")):
        assert load_pairs_from_path(path, cfg) == [("Bonjour", "Hello")]


def test_data_root_and_cache_root_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNSEQ_DATA", raising=False)
    monkeypatch.delenv("ATTNSEQ_CACHE", raising=False)
    assert data_root(DataConfig()) == Path("data")
    assert cache_root() == Path.home() / ".cache" / "attnseq"
    monkeypatch.setenv("ATTNSEQ_DATA", "/somewhere")
    monkeypatch.setenv("ATTNSEQ_CACHE", "/cache")
    assert data_root(DataConfig()) == Path("/somewhere")
    assert data_root(DataConfig(root="/explicit")) == Path("/explicit")
    assert cache_root() == Path("/cache")


def test_max_examples_limits_train_only(tmp_path: Path) -> None:
    write(tmp_path / "m.tsv", "".join(f"s{i}\tt{i}\n" for i in range(10)))
    cfg = local(tmp_path, FileFormat.tsv, {"train": "m.tsv", "valid": "m.tsv", "test": "m.tsv"})
    cfg.max_examples = 3
    splits = load_splits(cfg, 1)
    assert [len(pairs) for pairs in splits.values()] == [3, 10, 10]


def test_generated_tasks_unchanged() -> None:
    cfg = DataConfig(name="reverse", train_size=30, valid_size=5, test_size=5)
    sizes = {"train": 30, "valid": 5, "test": 5}
    expected = make_splits("reverse", sizes, 4, min_len=3, max_len=12, vocab_size=20)
    assert load_splits(cfg, 4) == expected
    assert load_splits(cfg, 4, ["test"]) == {"test": expected["test"]}


# ----------------------------------------------------------------------------- hub
def hub_config(**fields: Any) -> DataConfig:
    return DataConfig(
        name="hub",
        source=DataSource.hub,
        hub_name="someone/multi30k",
        hub_config="de-en",
        splits={"train": "train", "valid": "validation", "test": "test"},
        src_field="translation.de",
        tgt_field="translation.en",
        **fields,
    )


def test_hub_field_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_load_dataset(name: str, config: str | None, *, split: str, revision: Any) -> Any:
        calls.append((name, config, split, revision))
        rows = [{"de": f"{split} Satz {i}", "en": f"{split} sentence {i}"} for i in range(3)]
        return datasets.Dataset.from_dict({"translation": rows, "id": [0, 1, 2]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    splits = load_splits(hub_config(), seed=1)
    assert splits["valid"][2] == ("validation Satz 2", "validation sentence 2")
    assert calls == [
        ("someone/multi30k", "de-en", "train", None),
        ("someone/multi30k", "de-en", "validation", None),
        ("someone/multi30k", "de-en", "test", None),
    ]
    cfg = hub_config()
    cfg.hub_name = "someone/multi30k@refs/convert/parquet"
    load_splits(cfg, seed=1, splits=["test"])
    assert calls[-1] == ("someone/multi30k", "de-en", "test", "refs/convert/parquet")


def test_hub_offline_is_a_clear_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("Couldn't reach 'someone/multi30k' on the Hub (ConnectError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError) as error:
        load_splits(hub_config(), seed=1, splits=["train"])
    message = str(error.value)
    assert "'someone/multi30k'" in message and "offline" in message
    assert "data.source=local" in message

    def script(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Dataset scripts are no longer supported, but found multi30k.py")

    monkeypatch.setattr(datasets, "load_dataset", script)
    with pytest.raises(UserError, match="refs/convert/parquet"):
        load_splits(hub_config(), seed=1, splits=["train"])


# ------------------------------------------------------------- shards and compressed files
def test_parallel_shards_and_compressed_files(tmp_path: Path) -> None:
    """A glob prefix reads every shard in sorted order; .gz and .xz files read like plain."""
    import gzip
    import lzma

    write(tmp_path / "w/train-0.de", "a 0\nb 0\n")
    write(tmp_path / "w/train-0.en", "x 0\ny 0\n")
    (tmp_path / "w/train-1.de.gz").write_bytes(gzip.compress(b"a 1\r\nb 1\n"))
    (tmp_path / "w/train-1.en.gz").write_bytes(gzip.compress(b" x 1\ny 1\n"))
    (tmp_path / "w/train-2.de.xz").write_bytes(lzma.compress(b"a 2\n"))
    write(tmp_path / "w/train-2.en", "x 2\n")
    (tmp_path / "w/valid.de.gz").write_bytes(gzip.compress(b"v\n"))
    (tmp_path / "w/valid.en.xz").write_bytes(lzma.compress(b"z\n"))
    cfg = local(
        tmp_path,
        FileFormat.parallel,
        {"train": "w/train-*", "valid": "w/valid", "test": "w/valid"},
        src_lang="de",
        tgt_lang="en",
    )
    loaded = load_splits(cfg, 1, ["train", "valid"])
    assert loaded["train"] == [
        ("a 0", "x 0"),
        ("b 0", "y 0"),
        ("a 1", "x 1"),
        ("b 1", "y 1"),
        ("a 2", "x 2"),
    ]
    assert loaded["valid"] == [("v", "z")]


def test_a_pattern_that_matches_nothing(tmp_path: Path) -> None:
    write(tmp_path / "w/train-0.de", "a\n")
    write(tmp_path / "w/train-0.en", "x\n")
    cfg = local(tmp_path, FileFormat.parallel, {"train": "w/dev-*"}, src_lang="de", tgt_lang="en")
    with pytest.raises(UserError, match=r"no data file matches .*w/dev-\*\.de \(nor"):
        load_splits(cfg, 1, ["train"])
    write(tmp_path / "w/train-1.de", "b\n")  # a shard without its target side
    cfg.splits = {"train": "w/train-*"}
    with pytest.raises(UserError, match="matches 2 de files but 1 en files"):
        load_splits(cfg, 1, ["train"])


def test_a_truncated_gzip_file(tmp_path: Path) -> None:
    import gzip

    whole = gzip.compress("".join(f"line {i}\n" for i in range(5000)).encode())
    (tmp_path / "train.de.gz").write_bytes(whole[: len(whole) // 2])
    write(tmp_path / "train.en", "".join(f"x {i}\n" for i in range(5000)))
    cfg = local(tmp_path, FileFormat.parallel, {"train": "train"}, src_lang="de", tgt_lang="en")
    with pytest.raises(UserError) as error:
        load_splits(cfg, 1, ["train"])
    message = str(error.value)
    assert f"cannot read {tmp_path / 'train.de.gz'} after line" in message
    assert "truncated or corrupt gz file" in message and "\n" not in message
    readable = int(re.search(r"after line (\d+):", message).group(1))
    assert 1000 < readable < 5000  # the lines before the cut, about half of them


def test_shard_line_counts_name_both_files(tmp_path: Path) -> None:
    import gzip

    write(tmp_path / "s/a.de", "1\n2\n")
    write(tmp_path / "s/a.en", "1\n2\n")
    (tmp_path / "s/b.de.gz").write_bytes(gzip.compress(b"1\n2\n3\n4\n"))
    write(tmp_path / "s/b.en", "1\n2\n3\n")
    cfg = local(tmp_path, FileFormat.parallel, {"train": "s/*"}, src_lang="de", tgt_lang="en")
    with pytest.raises(UserError) as error:
        load_splits(cfg, 1, ["train"])
    assert str(error.value).startswith(
        f"parallel files differ in length: {tmp_path / 's/b.de.gz'} has 4 lines but "
        f"{tmp_path / 's/b.en'} has 3"
    )
