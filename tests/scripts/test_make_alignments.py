"""scripts/make_alignments.py: a training config's splits aligned by eflomal into the Pharaoh
files `data.alignments` reads (the aligner's own tests: tests/alignment/test_eflomal_baseline.py;
eflomal itself only where the optional extra is installed)."""

import importlib.util
from pathlib import Path

import pytest
from helpers import load_script, tiny_config

from attnseq.data.guided_alignment import read_alignment_file
from attnseq.data.sources import load_splits
from attnseq.data.word_alignments import read_pharaoh

make_alignments = load_script("scripts/make_alignments.py")

HAS_EFLOMAL = importlib.util.find_spec("eflomal") is not None
REVERSE = ["data.name=reverse", "data.train_size=80", "data.valid_size=10", "data.test_size=10"]


@pytest.mark.skipif(not HAS_EFLOMAL, reason="eflomal is not installed (pip install '.[align]')")
def test_eflomal_files_serve_guided_training(tmp_path: Path) -> None:
    assert make_alignments.main([str(tmp_path), *REVERSE]) == 0
    cfg = tiny_config(*REVERSE, f"data.alignments={{train: {tmp_path / 'train.forward'}}}")
    splits = load_splits(cfg.data, cfg.seed)
    for name, pairs in splits.items():
        links = read_pharaoh(tmp_path / f"{name}.forward")[0]
        assert len(links) == len(pairs)
    # the reverse task: each symbol is its own translation, so eflomal finds i <-> n-1-i
    found = read_alignment_file(cfg.data, "train", len(splits["train"]))
    expected = [
        {(i, len(src.split()) - 1 - i) for i in range(len(src.split()))}
        for src, _ in splits["train"]
    ]
    hits = sum(len(a & b) for a, b in zip(found, expected, strict=True))
    assert hits / sum(len(b) for b in expected) > 0.8
