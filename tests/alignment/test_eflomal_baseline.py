"""The eflomal baseline: one joint run cut back into corpora, both directions symmetrized, the
files guided training reads, and `attnseq align --method eflomal` (eflomal itself where the
optional extra is installed; a stand-in aligner elsewhere)."""

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnseq.alignment import eflomal_baseline
from attnseq.alignment.eflomal_baseline import (
    align_corpora,
    cut,
    symmetrized,
    write_alignment_files,
)
from attnseq.cli import align_runner
from attnseq.cli.app import app
from attnseq.data.word_alignments import read_pharaoh

HAS_EFLOMAL = importlib.util.find_spec("eflomal") is not None
needs_eflomal = pytest.mark.skipif(not HAS_EFLOMAL, reason="eflomal is not installed ('.[align]')")


def diagonal_aligner(pairs, folder: Path) -> dict[str, list[str]]:
    """A stand-in for eflomal: word k with word k; the reverse direction drops the last link."""
    forward, reverse = [], []
    for src, tgt in pairs:
        n = min(len(src.split()), len(tgt.split()))
        forward.append(" ".join(f"{k}-{k}" for k in range(n)))
        reverse.append(" ".join(f"{k}-{k}" for k in range(n - 1)))
    return {"forward": forward, "reverse": reverse}


def test_cut_gives_each_corpus_its_lines() -> None:
    assert cut(["a", "b", "c", "d"], {"train": 3, "wpt": 1}) == {
        "train": ["a", "b", "c"],
        "wpt": ["d"],
    }
    with pytest.raises(ValueError, match="4 lines of links for 5 sentence pairs"):
        cut(["a", "b", "c", "d"], {"train": 5})


def test_corpora_are_aligned_together_and_cut_back() -> None:
    corpora = {"train": [("a b c", "x y z"), ("a", "x")], "gold": [("b c", "y z")]}
    seen = []

    def recording(pairs, folder):
        seen.append(list(pairs))
        return diagonal_aligner(pairs, folder)

    links = align_corpora(corpora, aligner=recording)
    assert seen == [[*corpora["train"], *corpora["gold"]]]  # one joint run
    assert links["train"]["forward"] == [{(0, 0), (1, 1), (2, 2)}, {(0, 0)}]
    assert links["gold"]["reverse"] == [{(0, 0)}]
    # grow-diag-final-and adds back the links only the forward direction has
    assert symmetrized(links["train"], "grow-diag-final-and") == links["train"]["forward"]
    assert symmetrized(links["train"], "intersect") == [{(0, 0), (1, 1)}, set()]


def test_every_corpus_gets_its_files(tmp_path: Path) -> None:
    corpora = {"train": [("a b c", "x y z"), ("a", "x")], "gold": [("b c", "y z")]}
    written = write_alignment_files(corpora, tmp_path, aligner=diagonal_aligner)
    assert [path.name for path in written] == [
        f"{name}.{suffix}" for name in corpora for suffix in ("forward", "reverse", "gdfa")
    ]
    assert (tmp_path / "train.forward").read_text().splitlines() == ["0-0 1-1 2-2", "0-0"]
    assert (tmp_path / "gold.reverse").read_text().splitlines() == ["0-0"]
    assert (tmp_path / "train.gdfa").read_text().splitlines() == ["0-0 1-1 2-2", "0-0"]


def write_pairs(folder: Path, n: int = 40) -> tuple[Path, Path]:
    """n pairs of a reordering toy language: source word w<k> is target word v<k>, the target
    in reverse order, so the true links are (i, len - 1 - i)."""
    src_lines, tgt_lines = [], []
    for number in range(n):
        words = [f"w{(number * 7 + k * 3) % 11}" for k in range(2 + number % 4)]
        src_lines.append(" ".join(words))
        tgt_lines.append(" ".join(w.replace("w", "v") for w in reversed(words)))
    src, tgt = folder / "pairs.src", folder / "pairs.tgt"
    src.write_text("\n".join(src_lines) + "\n")
    tgt.write_text("\n".join(tgt_lines) + "\n")
    return src, tgt


def test_align_command_reads_no_model(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(align_runner, "_aligner", diagonal_aligner)
    monkeypatch.setattr(eflomal_baseline, "check_eflomal", lambda: None)
    monkeypatch.setattr(align_runner, "check_eflomal", lambda: None)
    src, tgt = write_pairs(tmp_path, 3)
    out = tmp_path / "links.gdfa"
    command = ["align", "--method", "eflomal", "--src", str(src), "--tgt", str(tgt)]
    gold = out.with_suffix(".gold")
    command += ["--symmetrize", "intersect", "--out", str(out), "--gold", str(gold)]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2 and "--gold file not found" in result.output
    gold.write_text("0-0\n0-0\n0-0\n")
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "eflomal, intersect of both directions" in result.output
    assert read_pharaoh(out)[0] == [{(0, 0)}, {(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 2)}]
    assert "AER" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["CHECKPOINT.pt"], "leave out CHECKPOINT"),
        (["--layer", "1"], "leave out --layer"),
        (["--soft", "a.npz"], "--method eflomal gives links only"),
    ],
)
def test_align_command_refuses_model_options_with_eflomal(tmp_path, extra, message) -> None:
    src, tgt = write_pairs(tmp_path, 2)
    (tmp_path / "CHECKPOINT.pt").write_bytes(b"x")
    args = [str(tmp_path / a) if a.endswith(".pt") else a for a in extra]
    result = CliRunner().invoke(
        app, ["align", *args, "--method", "eflomal", "--src", str(src), "--tgt", str(tgt)]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_align_command_without_checkpoint_or_eflomal_says_what_to_give(tmp_path) -> None:
    src, tgt = write_pairs(tmp_path, 2)
    result = CliRunner().invoke(app, ["align", "--src", str(src), "--tgt", str(tgt)])
    assert result.exit_code == 2
    assert "give a CHECKPOINT to align with, or --method eflomal" in result.output


@needs_eflomal
def test_eflomal_finds_the_reordering(tmp_path: Path) -> None:
    src, tgt = write_pairs(tmp_path, 200)
    out = tmp_path / "links.gdfa"
    result = CliRunner().invoke(
        app,
        [
            "align",
            "--method",
            "eflomal",
            "--src",
            str(src),
            "--tgt",
            str(tgt),
            "--symmetrize",
            "grow-diag-final-and",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    found = read_pharaoh(out)[0]
    lengths = [len(line.split()) for line in src.read_text().splitlines()]
    expected = [{(i, n - 1 - i) for i in range(n)} for n in lengths]
    hits = sum(len(a & b) for a, b in zip(found, expected, strict=True))
    assert hits / sum(len(b) for b in expected) > 0.8
