"""benchmarks/benchmark_data_scale.py: the synthetic corpora keep a real corpus's pairs and
lengths, the memory readings see a mapped file, and the report is written."""

import mmap
import os
from collections import Counter
from pathlib import Path

from helpers import load_script


def test_corpus_recombines_real_pairs(tmp_path: Path) -> None:
    script = load_script("benchmarks/benchmark_data_scale.py")
    source = tmp_path / "shared"
    (source / "multi30k").mkdir(parents=True)
    de = ["ein kleiner hund", "zwei katzen schlafen hier", "ja"]
    en = ["a small dog", "two cats sleep here", "yes"]
    for split in ("train", "val", "test_2016_flickr"):
        (source / f"multi30k/{split}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
        (source / f"multi30k/{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    folder = script.make_corpus(source, tmp_path / "corpus", 300, seed=2)
    src = (folder / "multi30k/train.de").read_text(encoding="utf-8").splitlines()
    tgt = (folder / "multi30k/train.en").read_text(encoding="utf-8").splitlines()
    assert len(src) == len(tgt) == 300
    originals = {frozenset(Counter(d.split()).items()): e for d, e in zip(de, en, strict=True)}
    for s, t in zip(src, tgt, strict=True):  # each pair: one real pair, words shuffled
        assert Counter(t.split()) == Counter(
            originals[frozenset(Counter(s.split()).items())].split()
        )
    assert len(set(src)) > 6  # recombined: more distinct lines than the source has
    assert (folder / "multi30k/val.en").read_text(encoding="utf-8").splitlines() == en


def test_memory_readings_see_a_mapped_file(tmp_path: Path) -> None:
    script = load_script("benchmarks/benchmark_data_scale.py")
    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / "split.arrow"
    path.write_bytes(os.urandom(4 * 1024 * 1024))
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        checksum = sum(mapped[i] for i in range(0, len(mapped), 4096))  # touch every page
        readings = script.pss(os.getpid(), cache)
        own = script.memory(os.getpid())
    assert checksum >= 0
    assert readings["cache_rss"] >= 4 * 1024 * 1024
    assert readings["cache_pss"] >= 2 * 1024 * 1024  # shared with the page cache only
    assert readings["pss"] > readings["cache_pss"] and own["RssAnon"] > 0


def test_report_files(tmp_path: Path) -> None:
    script = load_script("benchmarks/benchmark_data_scale.py")
    run = {
        "peak_rss_anon_mib": 900.0,
        "rss_file_at_peak_mib": 300.0,
        "preparation_s": None,
        "first_update_s": 9.5,
        "seconds_per_update": 1.25,
    }
    rows = [
        {
            "code": code,
            "pairs": pairs,
            "preparation_s": 10.0,
            "pairs_per_s": pairs / 10,
            "cache_mib": 26.0,
            "first": run,
            "cached": run,
            "data": {"load_and_batches_rss_anon_mib": 40.0},
        }
        for code in ("before", "after")
        for pairs in (100_000, 1_000_000)
    ]
    ddp = {
        "ranks": 2,
        "updates": 200,
        "pss_sum_mib": 2000.0,
        "rss_anon_sum_mib": 1800.0,
        "cache_mib": 267.0,
        "cache_pss_sum_mib": 150.0,
        "cache_rss_per_rank_mib": [150, 150],
        "private_plus_one_cache_mib": 2067.0,
    }
    script.write_outputs(tmp_path, rows, ddp, "a note")
    table = (tmp_path / "data_scale_table.md").read_text(encoding="utf-8")
    assert (
        "| after | 1,000,000 | 10.0 | 100,000 | 26 | 900 | 900 | 300 | 9.5 | 1.25 | 40 |" in table
    )
    assert "| 2 | 200 | 2,000 | 1,800 | 267 | 2,067 | 150 | 150, 150 |" in table
    assert (tmp_path / "data_scale.png").stat().st_size > 10_000
    assert "a note" in table and (tmp_path / "data_scale.json").is_file()
