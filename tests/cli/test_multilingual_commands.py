"""The commands of attnseq's analysis side on Hugging Face M2M100 and mBART-50 folders, as on a
checkpoint: translate (with another target language as an override), score and align in
languages chosen with --src-lang and --tgt-lang, align with AER, explain, heads with pruning,
compare. The models are random-weight stand-ins (tests/multilingual_stand_ins.py), copied:
commands write beside them."""

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
SHAPES = ["m2m100", "mbart50"]  # one stand-in of each family
FRENCH = {"m2m100": "fr", "mbart50": "fr_XX"}


@pytest.fixture(scope="module")
def work(multilingual_folders: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a copy of each family's stand-in (m2m100/, mbart50/) and the texts."""
    folder = tmp_path_factory.mktemp("multilingual-commands")
    for shape in SHAPES:
        shutil.copytree(multilingual_folders[shape], folder / shape)
    for name, lines in (("src.en", SOURCES), ("tgt.de", TARGETS), ("gold.txt", GOLD)):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    pairs = [f"{src}\t{tgt}" for src, tgt in zip(SOURCES, TARGETS, strict=True)]
    (folder / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    return folder


def run(work: Path, *args: str) -> str:
    result = attnseq_in_process(*args, cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_translate_into_another_language(work: Path, shape: str) -> None:
    french = f"data.tgt_lang_code={FRENCH[shape]}"
    translated = run(work, "translate", shape, "-i", "src.en", "--beam", "1", french)
    model = attnseq.load(work / shape, overrides=[french])
    expected = model.translate(SOURCES, beam=1)
    assert [t.text for t in expected] == translated.splitlines()[: len(SOURCES)]
    code = model.tokenizers.tgt.codes[FRENCH[shape]]
    assert all(t.output_ids[0, 0] == code for t in expected)  # forced, without text
    own = attnseq.load(work / shape).translate(SOURCES, beam=1)
    assert all(t.output_ids[0, 0] != code for t in own)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_score_in_the_languages_chosen(work: Path, shape: str) -> None:
    output = run(
        work, "score", shape, "--src", "src.en", "--tgt", "tgt.de", "--tgt-lang", FRENCH[shape]
    )
    scorer = attnseq.load(work / shape, overrides=[f"data.tgt_lang_code={FRENCH[shape]}"]).scorer
    expected = [
        score.line() for score in scorer.score_stream(zip(SOURCES, TARGETS, strict=True), None, 8)
    ]
    assert output.splitlines()[: len(SOURCES)] == expected
    assert run(work, "score", shape, "--src", "src.en", "--tgt", "tgt.de") != output


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_align_on_words(work: Path, shape: str) -> None:
    for method in ("attention", "shift-att"):
        output = run(
            work,
            *("align", shape, "--src", "src.en", "--tgt", "tgt.de", "--gold", "gold.txt"),
            *("--method", method, "--layer", "1", "--head", "2"),
        )
        assert "AER" in output and "13 sure gold" in output
        links = [link.split("-") for link in output.splitlines()[0].split()]
        # word links: within the 6 source and 5 target words of the first pair
        assert links and all(int(s) < 6 and int(t) < 5 for s, t in links)
    other = run(
        work, "align", shape, "--src", "src.en", "--tgt", "tgt.de", "--src-lang", FRENCH[shape]
    )
    assert other.splitlines()[0]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
def test_explain_heads_and_compare(work: Path, shape: str) -> None:
    page = f"{shape}.html"
    run(work, "explain", shape, "--src", SOURCES[0], "--out", page, "--tgt-lang", FRENCH[shape])
    assert (work / page).stat().st_size > 0
    pruned = f"{shape}-pruned.pt"
    output = run(
        work,
        *("heads", shape, "--max-batches", "1", "--prune", "0.25", "--out", pruned),
        *("--report-dir", f"{shape}-heads"),
    )
    assert (
        "pruned 6 heads" in output and (work / f"{shape}-heads" / f"{shape}.valid.json").is_file()
    )
    model = attnseq.load(work / pruned)  # a self-contained attnseq checkpoint, its languages kept
    assert model.tokenizers.src.kind == shape and "head_pruning" in model.trained.payload
    assert model.tokenizers.tgt.language == attnseq.load(work / shape).tokenizers.tgt.language
    output = run(work, "compare", shape, pruned, "--split", "pairs.tsv", "--src", "src.en")
    assert pruned in output


@pytest.mark.slow
def test_fine_tuning_keeps_the_languages_chosen(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`model.init_from` with data.src_lang_code and data.tgt_lang_code: the run's data are
    encoded in them, its checkpoint keeps them and forces the target's code first."""
    from conftest import SHARED_DATA

    data = tmp_path / "data"
    data.mkdir()
    for split, source in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("de", "en"):
            lines = (SHARED_DATA / "multi30k" / f"{source}.{lang}").read_text().splitlines()
            (data / f"{split}.{lang}").write_text("\n".join(lines[:16]) + "\n", encoding="utf-8")
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    run(
        work,
        *("train", "model=transformer", "data=multi30k", f"data.root={data}"),
        *("data.splits.train=train", "data.splits.valid=valid", "data.splits.test=test"),
        *("data.max_src_len=50", "data.max_tgt_len=50", "decoding.max_output_ratio=1"),
        *("trainer.max_steps=2", "trainer.validate_every=2", "trainer.threads=1"),
        *("trainer.device=cpu", "trainer.progress=false", f"hydra.run.dir={run_dir}"),
        f"model.init_from={work / 'm2m100'}",
        *("data.src_lang_code=de", "data.tgt_lang_code=fr"),
    )
    model = attnseq.load(run_dir / "checkpoints" / "best.pt")
    pair = model.tokenizers
    assert (pair.src.language, pair.tgt.language) == ("de", "fr")
    assert model.trained.cfg.decoding.forced_first_token == pair.tgt.codes["fr"]
    translated = model.translate(["Ein Hund läuft."], beam=1)
    assert translated[0].output_ids[0, 0] == pair.tgt.codes["fr"]
