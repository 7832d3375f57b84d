"""Every command that takes a CHECKPOINT takes a Hugging Face Marian folder, and hf:ORG/NAME
from huggingface_hub's cache, and works on it as on a checkpoint: translate, score, eval,
align (every layer and head), explain, heads (with pruning), visualize-alignment, compare,
attnseq.load; export says in one line what CTranslate2 cannot express. The model is a
random-weight stand-in (tests/marian_stand_ins.py), copied: commands write beside it."""

import shutil
from pathlib import Path

import pytest
from helpers import attnseq_in_process

pytest.importorskip("transformers", reason="the stand-ins are built with transformers")

import attnseq  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")

SOURCES = ["Ein Mann fährt Fahrrad .", "Zwei Hunde spielen im Schnee ."]
TARGETS = ["A man rides a bike .", "Two dogs play in the snow ."]
GOLD = ["0-0 1-1 2-2 3-4 4-5", "0-0 1-1 2-2 3-3 4-4 5-5 5-6"]


@pytest.fixture(scope="module")
def work(marian_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a copy of the shared-vocabulary stand-in (model/) and the texts."""
    folder = tmp_path_factory.mktemp("pretrained-commands")
    shutil.copytree(marian_folders["shared"], folder / "model")
    for name, lines in (("src.de", SOURCES), ("tgt.en", TARGETS), ("gold.txt", GOLD)):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    pairs = [f"{src}\t{tgt}" for src, tgt in zip(SOURCES, TARGETS, strict=True)]
    (folder / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    return folder


def run(work: Path, *args: str) -> str:
    result = attnseq_in_process(*args, cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_translate_and_score(work: Path) -> None:
    translated = run(work, "translate", "model", "-i", "src.de", "--beam", "1")
    expected = attnseq.load(work / "model").translate(SOURCES, beam=1)
    assert [t.text for t in expected] == translated.splitlines()[: len(SOURCES)]
    scored = run(work, "score", "model", "--src", "src.de", "--tgt", "tgt.en")
    assert "scored 2 of 2 pairs" in scored


def test_eval_of_a_file_split(work: Path) -> None:
    output = run(work, "eval", "model", "--split", "pairs.tsv", "--out", "results")
    assert "pairs_tsv/bleu" in output
    folders = list((work / "results" / "model").iterdir())
    assert len(folders) == 1 and "lpk0-stopcurrent-eosatlimit" in folders[0].name


@pytest.mark.slow
def test_align_every_layer_and_head(work: Path) -> None:
    for method in ("attention", "shift-att", "rollout"):
        files = ["--src", "src.de", "--tgt", "tgt.en", "--gold", "gold.txt"]
        output = run(
            work, "align", "model", *files, "--method", method, "--layer", "1", "--head", "2"
        )
        assert "AER" in output and len(output.splitlines()[0].split()) >= 5


@pytest.mark.slow
def test_explain_heads_and_visualize(work: Path) -> None:
    run(work, "explain", "model", "--src", SOURCES[0], "--out", "page.html")
    assert (work / "page.html").stat().st_size > 0
    run(work, "visualize-alignment", "model", "--src", SOURCES[0], "--out", "a.png")
    assert (work / "a.png").stat().st_size > 0
    pruning = ["--max-batches", "1", "--prune", "0.25", "--out", "pruned.pt"]
    output = run(work, "heads", "model", *pruning, "--report-dir", "heads")
    assert "pruned 6 heads" in output and (work / "heads" / "model.valid.json").is_file()
    pruned = attnseq.load(work / "pruned.pt")  # a self-contained attnseq checkpoint
    assert pruned.tokenizers.src.kind == "marian" and "head_pruning" in pruned.trained.payload
    masks = [v for k, v in pruned.module.state_dict().items() if k.endswith("head_mask")]
    assert int(sum((mask == 0).sum() for mask in masks)) == 6
    run(work, "compare", "model", "pruned.pt", "--split", "pairs.tsv", "--src", "src.de")


@pytest.mark.slow
def test_export_to_ctranslate2_decodes_as_the_model(work: Path) -> None:
    """The engine decodes the export (swish, the logits bias, the decoder starting from
    <pad>) greedily as attnseq does."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (attnseq[ct2])")
    run(work, "export", "model", "--to", "ctranslate2", "ct2")
    engine = run(work, "translate", "--engine", "ctranslate2", "ct2", "-i", "src.de", "--beam", "1")
    ours = run(work, "translate", "model", "-i", "src.de", "--beam", "1")
    count = len(SOURCES)
    assert engine.splitlines()[:count] == ours.splitlines()[:count]


def test_an_hf_id_from_the_cache(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    commit = "89abcdef0123456789abcdef0123456789abcdef"
    storage = work / "hub" / "models--testorg--marian-tiny"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(commit)
    shutil.copytree(work / "model", storage / "snapshots" / commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(work / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    from_cache = attnseq.load("hf:testorg/marian-tiny").translate(SOURCES[0], beam=1).text
    assert from_cache == attnseq.load(work / "model").translate(SOURCES[0], beam=1).text
    output = run(work, "score", "hf:testorg/marian-tiny", "--src", "src.de", "--tgt", "tgt.en")
    assert "scored 2 of 2 pairs" in output
    missing = attnseq_in_process("translate", "hf:testorg/other", "-i", "src.de", cwd=work)
    assert missing.returncode == 2 and "is not in the Hugging Face cache" in missing.stderr
