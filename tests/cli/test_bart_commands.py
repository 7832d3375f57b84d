"""The commands of attnseq's analysis side on a Hugging Face BART folder, as on a checkpoint:
translate, align (every method, one layer and head, AER against gold word links), explain,
heads with pruning, compare. The model is a random-weight stand-in
(tests/bart_stand_ins.py), copied: commands write beside it."""

import shutil
from pathlib import Path

import pytest
from helpers import attnseq_in_process

pytest.importorskip("transformers", reason="the stand-ins are built with transformers")

import attnseq  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCES = ["A man rides a bike .", "Two dogs play in the snow ."]
TARGETS = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee ."]
GOLD = ["0-0 1-1 2-2 3-3 4-3 5-4", "0-0 1-1 2-2 3-3 4-3 5-4 6-5"]


@pytest.fixture(scope="module")
def work(bart_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a copy of the tied stand-in (model/) and the texts."""
    folder = tmp_path_factory.mktemp("bart-commands")
    shutil.copytree(bart_folders["tied"], folder / "model")
    for name, lines in (("src.en", SOURCES), ("tgt.de", TARGETS), ("gold.txt", GOLD)):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    pairs = [f"{src}\t{tgt}" for src, tgt in zip(SOURCES, TARGETS, strict=True)]
    (folder / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    return folder


def run(work: Path, *args: str) -> str:
    result = attnseq_in_process(*args, cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_translate_starts_with_the_forced_token(work: Path) -> None:
    translated = run(work, "translate", "model", "-i", "src.en", "--beam", "1")
    expected = attnseq.load(work / "model").translate(SOURCES, beam=1)
    assert [t.text for t in expected] == translated.splitlines()[: len(SOURCES)]
    assert all(t.output_ids[0, 0] == 0 for t in expected)  # the forced <s>, without text
    assert all(not t.text.startswith("<s>") for t in expected)


@pytest.mark.slow
def test_align_every_method_on_words(work: Path) -> None:
    for method in ("attention", "shift-att", "rollout"):
        output = run(
            work,
            "align",
            "model",
            "--src",
            "src.en",
            "--tgt",
            "tgt.de",
            "--gold",
            "gold.txt",
            "--method",
            method,
            "--layer",
            "1",
            "--head",
            "2",
        )
        assert "AER" in output and "13 sure gold" in output
        links = [link.split("-") for link in output.splitlines()[0].split()]
        # word links: within the 6 source and 5 target words of the first pair
        assert links and all(int(s) < 6 and int(t) < 5 for s, t in links)


@pytest.mark.slow
def test_explain_heads_and_compare(work: Path) -> None:
    run(work, "explain", "model", "--src", SOURCES[0], "--out", "page.html")
    assert (work / "page.html").stat().st_size > 0
    output = run(
        work,
        "heads",
        "model",
        "--max-batches",
        "1",
        "--prune",
        "0.25",
        "--out",
        "pruned.pt",
        "--report-dir",
        "heads",
    )
    assert "pruned 6 heads" in output and (work / "heads" / "model.valid.json").is_file()
    pruned = attnseq.load(work / "pruned.pt")  # a self-contained attnseq checkpoint
    assert pruned.tokenizers.src.kind == "bart" and "head_pruning" in pruned.trained.payload
    output = run(work, "compare", "model", "pruned.pt", "--split", "pairs.tsv", "--src", "src.en")
    assert "pruned.pt" in output
