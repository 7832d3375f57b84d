"""prepare_data: tokenizers, length rules and their counts, token batches, and the Arrow cache."""

import dataclasses
import io
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import batch_fingerprint

import attnseq.data.prepare as prepare_module
import attnseq.data.workers as workers_module
from attnseq.config.choices import (
    DataSource,
    FileFormat,
    SentencePieceModel,
    TaskType,
    TokenizerKind,
)
from attnseq.config.schema import DataConfig
from attnseq.data.batching import TokenBatchSampler, example_lengths
from attnseq.data.prepare import PreparedData, prepare_data
from attnseq.data.sentencepiece_tokenizer import SentencePieceTokenizer
from attnseq.data.tokenizers import TokenizerPair, WordTokenizer
from attnseq.errors import UserError

N_LINES = 200


def multi30k_config(root: Path, **options: object) -> DataConfig:
    """Multi30k under `root` as `data=multi30k` names its files: German to English,
    sentencepiece, sentences up to 100 pieces, and `options`."""
    return DataConfig(
        name="multi30k",
        source=DataSource.local,
        format=FileFormat.parallel,
        root=str(root),
        splits={
            "train": "multi30k/train",
            "valid": "multi30k/val",
            "test": "multi30k/test_2016_flickr",
        },
        src_lang="de",
        tgt_lang="en",
        tokenizer=TokenizerKind.sentencepiece,
        max_src_len=100,
        max_tgt_len=100,
        **options,
    )


@pytest.fixture
def multi30k(shared_data: Path, tmp_path: Path) -> DataConfig:
    """A 200-line slice of Multi30k under tmp_path/data, configured like the packaged
    data/multi30k."""
    root = tmp_path / "data"
    (root / "multi30k").mkdir(parents=True)
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            with (shared_data / f"multi30k/{split}.{lang}").open(encoding="utf-8") as source:
                head = [next(source) for _ in range(N_LINES)]
            (root / f"multi30k/{split}.{lang}").write_text("".join(head), encoding="utf-8")
    return multi30k_config(root, spm_vocab_size=600)


def test_multi30k_slice_end_to_end(cache: Path, multi30k: DataConfig) -> None:
    data = prepare_data(multi30k, seed=1)
    assert list(data.examples) == ["train", "valid", "test"]
    tokenizers = data.tokenizers
    assert isinstance(tokenizers.src, SentencePieceTokenizer)
    assert tokenizers.src is tokenizers.tgt  # spm_joint: one model for both sides
    assert tokenizers.src.vocab_size == 600
    for name, examples in data.examples.items():
        assert data.stats[name] == {
            "total": N_LINES,
            "kept": N_LINES,
            "dropped_empty": 0,
            "skipped_empty": 0,
            "dropped_too_long": 0,
            "truncated": 0,
        }
        assert len(data.pairs[name]) == len(examples) == N_LINES
        for (src, tgt), (src_ids, tgt_ids) in zip(data.pairs[name], examples, strict=True):
            assert (src_ids, tgt_ids) == (tokenizers.src.encode(src), tokenizers.tgt.encode(tgt))
            if name == "train":  # every character was seen in training: exact round trip
                assert tokenizers.src.decode(src_ids) == " ".join(src.split())
                assert tokenizers.tgt.decode(tgt_ids) == " ".join(tgt.split())


def test_token_batches_respect_the_budget(cache: Path, multi30k: DataConfig) -> None:
    data = prepare_data(multi30k, seed=1, splits=["train"])
    examples = data.examples["train"]
    sampler = TokenBatchSampler(example_lengths(examples), max_tokens=300, seed=1)
    seen: list[int] = []
    for batch in sampler.batches(0):
        widths = [max(len(examples[i][0]), len(examples[i][1]) + 1) for i in batch]
        assert len(batch) * max(widths) <= 300
        seen.extend(batch)
    assert sorted(seen) == list(range(len(examples)))
    assert 0.0 <= sampler.padding_share(0) < 0.5


def test_arrow_cache_is_reused(
    cache: Path, multi30k: DataConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = prepare_data(multi30k, seed=1)
    entries = list((cache / "prepared").iterdir())
    assert len(entries) == 1 and (entries[0] / "meta.json").is_file()

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cache hit must not load, train or encode")

    with monkeypatch.context() as patched:
        for name in ("load_splits", "train_tokenizers", "encode_chunk"):
            patched.setattr(prepare_module, name, fail)
        second = prepare_data(multi30k, seed=2)  # real data does not depend on the seed
        # A resumed run or an evaluated checkpoint gives the tokenizers this entry trained:
        # the same entry, not a second encoding of the corpus.
        resumed = prepare_data(multi30k, seed=1, tokenizers=first.tokenizers)
        test_only = prepare_data(multi30k, seed=1, tokenizers=first.tokenizers, splits=["test"])
    assert resumed.examples == first.examples and resumed.cache_folder == first.cache_folder
    assert list(test_only.examples) == ["test"] and test_only.pairs["test"] == first.pairs["test"]
    assert second.examples == first.examples
    assert second.pairs == first.pairs and second.stats == first.stats
    assert second.tokenizers.src == first.tokenizers.src
    assert second.tokenizers.src is second.tokenizers.tgt

    # A data file that changes (size, modification time) is a different entry.
    test_en = Path(multi30k.root or "") / "multi30k/test_2016_flickr.en"
    test_en.write_text(test_en.read_text(encoding="utf-8").replace("A ", "One ", 1), "utf-8")
    os.utime(test_en, ns=(1, 1))
    third = prepare_data(multi30k, seed=1)
    assert third.pairs["test"][0][1].startswith("One ")
    assert len(list((cache / "prepared").iterdir())) == 2


def test_given_tokenizers_and_splits(cache: Path, multi30k: DataConfig) -> None:
    trained = prepare_data(multi30k, seed=1)
    buffer = io.BytesIO()
    torch.save({"tokenizers": trained.tokenizers.state()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["tokenizers"]
    tokenizers = TokenizerPair.from_state(state)
    test_only = prepare_data(multi30k, seed=1, tokenizers=tokenizers, splits=["test"])
    assert list(test_only.examples) == ["test"]
    assert test_only.tokenizers is tokenizers
    assert test_only.examples["test"] == trained.examples["test"]
    # Other tokenizers than the entry's: encoded anew, never the entry's ids.
    smaller = prepare_data(dataclasses.replace(multi30k, spm_vocab_size=300), seed=1)
    other = prepare_data(multi30k, seed=1, tokenizers=smaller.tokenizers, splits=["test"])
    assert other.examples["test"] == smaller.examples["test"] != trained.examples["test"]


def test_separate_models_when_not_joint(cache: Path, multi30k: DataConfig) -> None:
    multi30k.spm_joint = False
    multi30k.spm_vocab_size = 300
    data = prepare_data(multi30k, seed=1, splits=["valid"])
    assert data.tokenizers.src != data.tokenizers.tgt
    assert data.tokenizers.src.pieces("Hund") != data.tokenizers.tgt.pieces("Hund")
    assert len(list((cache / "spm").glob("*.model"))) == 2


def word_config(task: TaskType, **fields: Any) -> DataConfig:
    return DataConfig(
        name="toy",
        source=DataSource.local,
        task=task,
        tokenizer=TokenizerKind.word,
        max_src_len=4,
        max_tgt_len=3,
        **fields,
    )


PAIRS = [
    ("a b", "x y"),  # fine
    ("", "x"),  # empty source
    ("a", ""),  # empty target
    ("a b c d e f", "x"),  # source over 4
    ("a", "x y z w"),  # target over 3
]


@pytest.mark.parametrize("task", [TaskType.translation, TaskType.summarization])
def test_length_rules_and_counts(
    cache: Path, task: TaskType, caplog: pytest.LogCaptureFixture
) -> None:
    pairs = {"train": PAIRS, "test": PAIRS}
    with caplog.at_level(logging.INFO, logger="attnseq"):
        data = prepare_data(word_config(task), seed=1, pairs=pairs)
    summarization = task is TaskType.summarization
    assert data.stats["train"] == {
        "total": 5,
        "kept": 2 if summarization else 1,
        "dropped_empty": 2,
        "skipped_empty": 0,
        "dropped_too_long": 1 if summarization else 2,
        "truncated": 1 if summarization else 0,
    }
    if summarization:  # the long source is cut to max_src_len, its text stays
        assert data.pairs["train"] == [PAIRS[0], PAIRS[3]]
        assert data.examples["train"][1][0] == data.tokenizers.src.encode("a b c d")
    # Evaluation splits keep every example and the full reference text; only ids are cut.
    assert data.pairs["test"] == PAIRS
    assert data.stats["test"] == {
        "total": 5,
        "kept": 5,
        "dropped_empty": 0,
        "skipped_empty": 2,
        "dropped_too_long": 0,
        "truncated": 2,
    }
    assert [len(src) for src, _ in data.examples["test"]] == [2, 0, 1, 4, 1]
    assert [len(tgt) for _, tgt in data.examples["test"]] == [2, 1, 0, 1, 3]
    assert isinstance(data.tokenizers.src, WordTokenizer)
    logged = caplog.text
    assert "toy/train: 5 pairs" in logged and "2 empty" in logged
    assert "toy/test: 5 pairs" in logged and "2 with an empty source or target" in logged
    assert not (cache / "prepared").exists()  # given pairs are not cached


def test_nothing_left_to_train_on(cache: Path) -> None:
    cfg = word_config(TaskType.translation)
    with pytest.raises(UserError, match="no training examples left"):
        prepare_data(cfg, seed=1, pairs={"train": PAIRS[1:]})
    with pytest.raises(UserError, match="no pairs given for split"):
        prepare_data(cfg, seed=1, pairs={"train": PAIRS}, splits=["valid"])


def test_nothing_left_to_evaluate(cache: Path) -> None:
    cfg = word_config(TaskType.translation)
    empty_only = [("", "x"), ("a", "")]
    with pytest.raises(UserError, match="nothing to evaluate in the test split: all 2 examples"):
        prepare_data(cfg, seed=1, pairs={"train": PAIRS, "test": empty_only})
    with pytest.raises(UserError, match="nothing to evaluate in the valid split: it holds no"):
        prepare_data(cfg, seed=1, pairs={"train": PAIRS, "valid": []})


def test_generated_tasks_are_not_cached(cache: Path) -> None:
    cfg = DataConfig(name="reverse", tokenizer=TokenizerKind.word, train_size=50, valid_size=5)
    cfg.test_size = 5
    data = prepare_data(cfg, seed=3)
    assert isinstance(data, PreparedData)
    assert [len(data.examples[name]) for name in ("train", "valid", "test")] == [50, 5, 5]
    assert data.stats["train"]["kept"] == 50
    src, tgt = data.pairs["valid"][0]
    assert data.tokenizers.tgt.decode(data.examples["valid"][0][1]) == tgt
    assert tgt.split() == src.split()[::-1]
    assert not (cache / "prepared").exists()


# ----------------------------------------------------------------- batches stay the same
# sha256 of every batch (positions and padded ids, tests/helpers.py `batch_fingerprint`) of
# three shuffled epochs and the unshuffled order, computed when the examples were whole-split
# Python lists: reading them from the memory-mapped Arrow cache must give the very same batches.
LOCAL_FINGERPRINTS = {
    "train": "ffa9b2512dde13c4cec73d1cbfab06e171f35798e9dfb1d1bbdaf6ab20049a5b",
    "valid": "6f48fc3f8d30a0107d0e0288d964d6142cc9997797ef60d4483bf81998cd3200",
    "test": "f9f2d7ab18797d83725e3c248688168e4d54e86f567614dd6bcf83e68772c573",
}
MULTI30K_FINGERPRINTS = {
    "train": "78985631eb9a45b6efa045b296da33e112db27b57f1cb2cb2e69aad81d6bfa64",
    "valid": "2cebc3d8c111900db25c3640bf193fca47b06bdaebc298255359d3284dfb177b",
    "test": "82c110ffedd3b91ec5439071e59c531cf5388e6263886ab57467aad4d5593b87",
}
DATES_FINGERPRINTS = {
    "train": "086cd57334e4144b32f90237a7f0e8d4306c88ec8590d2f66bad12ab754d7ff7",
    "valid": "3f298e3e968f91772e84d4f70d8818fa60303e480145790c6e3048109725819d",
    "test": "ddffbc636f601773ffa30b4d901dbf6de6a6ae6d9dffbd8fd64be380b2e14b8d",
}


def fingerprints(data: PreparedData, cfg: DataConfig, seed: int) -> dict[str, str]:
    return {
        split: batch_fingerprint(
            examples, max_tokens=cfg.max_tokens, max_sentences=cfg.max_sentences, seed=seed
        )
        for split, examples in data.examples.items()
    }


def write_generated_corpus(root: Path) -> DataConfig:
    """Generated dates as local parallel files (train 3,000, valid and test 200 pairs): a
    corpus that goes through the Arrow cache without the shared data."""
    from attnseq.data.generated import make_splits

    splits = make_splits("dates", {"train": 3000, "valid": 200, "test": 200}, seed=5)
    for name, pairs in splits.items():
        for side, suffix in ((0, "src"), (1, "tgt")):
            text = "".join(pair[side] + "\n" for pair in pairs)
            (root / f"{name}.{suffix}").write_text(text, encoding="utf-8")
    return DataConfig(
        name="dates_files",
        source=DataSource.local,
        format=FileFormat.parallel,
        root=str(root),
        splits={"train": "train", "valid": "valid", "test": "test"},
        src_lang="src",
        tgt_lang="tgt",
        tokenizer=TokenizerKind.char,
        max_tokens=600,
    )


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [50_000, 7])
def test_batches_of_a_cached_local_corpus_are_unchanged(
    chunk: int, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also when preparation reads, encodes (in worker processes) and writes 7 pairs at a time
    (hundreds of Arrow record batches per split), from the files as streams, never through a
    list of the lines."""
    cfg = write_generated_corpus(tmp_path)
    monkeypatch.setattr(workers_module, "ENCODE_CHUNK", chunk)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parallel files are streamed, not loaded as lists")

    pools: list[object] = []

    class CountedPool(workers_module.ProcessPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pools.append(self)
            super().__init__(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(prepare_module, "load_splits", fail)
        patched.setattr(workers_module, "ProcessPoolExecutor", CountedPool)
        patched.setattr(workers_module.os, "cpu_count", lambda: 2)
        first = prepare_data(cfg, seed=1)
    # A split of several chunks (here train, valid and test) is encoded by worker processes;
    # one chunk, in this process.
    assert len(pools) == (3 if chunk == 7 else 0)
    assert first.cache_folder is not None
    assert len(first.examples["train"].src._offsets) == -(-3000 // chunk)  # one per chunk
    assert fingerprints(first, cfg, seed=4) == LOCAL_FINGERPRINTS
    cached = prepare_data(cfg, seed=1)
    assert fingerprints(cached, cfg, seed=4) == LOCAL_FINGERPRINTS


@pytest.mark.slow
def test_batches_of_a_generated_task_are_unchanged(cache: Path) -> None:
    cfg = DataConfig()  # the default: dates, 20,000 training pairs
    assert fingerprints(prepare_data(cfg, seed=1), cfg, seed=1) == DATES_FINGERPRINTS


@pytest.mark.slow
def test_batches_of_multi30k_are_unchanged(cache: Path, shared_data: Path) -> None:
    """The whole of Multi30k with `config=multi30k_transformer`'s data settings (joint BPE
    8,000, 2,048-token batches, seed 1), first prepared and then from the cache."""
    cfg = multi30k_config(
        shared_data,
        spm_vocab_size=8000,
        spm_model_type=SentencePieceModel.bpe,
        spm_character_coverage=1.0,
        spm_joint=True,
        max_tokens=2048,
    )
    assert fingerprints(prepare_data(cfg, seed=1), cfg, seed=1) == MULTI30K_FINGERPRINTS
    assert fingerprints(prepare_data(cfg, seed=1), cfg, seed=1) == MULTI30K_FINGERPRINTS
