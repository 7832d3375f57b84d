"""scripts/make_alignments.py: one joint alignment run cut back into per-split Pharaoh files
that `data.alignments` reads (eflomal itself only where the optional extra is installed)."""

import importlib.util
from pathlib import Path

import pytest
from helpers import tiny_config

from attnseq.data.guided_alignment import read_alignment_file
from attnseq.data.sources import load_splits
from attnseq.data.word_alignments import read_pharaoh

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_alignments.py"
spec = importlib.util.spec_from_file_location("make_alignments", SCRIPT)
assert spec is not None and spec.loader is not None
make_alignments = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_alignments)

HAS_SYMMETRIZE = importlib.util.find_spec("attnseq.alignment.word_links") is not None
HAS_EFLOMAL = importlib.util.find_spec("eflomal") is not None
REVERSE = ["data.name=reverse", "data.train_size=80", "data.valid_size=10", "data.test_size=10"]


def test_cut_gives_each_corpus_its_lines() -> None:
    pieces = make_alignments.cut(["a", "b", "c", "d"], {"train": 3, "wpt": 1})
    assert pieces == {"train": ["a", "b", "c"], "wpt": ["d"]}
    with pytest.raises(ValueError, match="4 lines of links for 5 sentence pairs"):
        make_alignments.cut(["a", "b", "c", "d"], {"train": 5})


def diagonal_aligner(pairs, folder: Path) -> dict[str, list[str]]:
    """A stand-in for eflomal: word k with word k; the reverse direction drops the last link."""
    forward, reverse = [], []
    for src, tgt in pairs:
        n = min(len(src.split()), len(tgt.split()))
        forward.append(" ".join(f"{k}-{k}" for k in range(n)))
        reverse.append(" ".join(f"{k}-{k}" for k in range(n - 1)))
    return {"forward": forward, "reverse": reverse}


def test_every_corpus_gets_its_files(tmp_path: Path) -> None:
    corpora = {"train": [("a b c", "x y z"), ("a", "x")], "gold": [("b c", "y z")]}
    written = make_alignments.align_corpora(corpora, tmp_path, aligner=diagonal_aligner)
    names = {path.name for path in written}
    assert {"train.forward", "train.reverse", "gold.forward", "gold.reverse"} <= names
    assert (tmp_path / "train.forward").read_text().splitlines() == ["0-0 1-1 2-2", "0-0"]
    assert (tmp_path / "gold.reverse").read_text().splitlines() == ["0-0"]
    if HAS_SYMMETRIZE:  # grow-diag-final-and adds back the link only forward has
        assert (tmp_path / "train.gdfa").read_text().splitlines() == ["0-0 1-1 2-2", "0-0"]


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
    expected = [{(i, len(src.split()) - 1 - i) for i in range(len(src.split()))}
                for src, _ in splits["train"]]  # fmt: skip
    hits = sum(len(a & b) for a, b in zip(found, expected, strict=True))
    assert hits / sum(len(b) for b in expected) > 0.8
