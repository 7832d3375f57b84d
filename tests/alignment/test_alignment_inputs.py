"""The inputs of `attnseq align`, `score` and `eval --gold` are checked before they are
used: gold links outside their sentence are refused (file, line, link, word counts), a
`--reverse` model that the checkpoints show to translate the same way is refused, and a text
that is mostly <unk> for a model gives one warning line with its unknown-token rate."""

from pathlib import Path

import pytest
from helpers import (
    SRC,
    invoke,
    one_line_exit_2,
    run_eval,
    toy_transformer,
    untrained_checkpoint,
    write_set,
)

from attnseq.data.file_readers import read_parallel

UNKNOWN = ["zork blip quux frob", "wug dax fep", "snarf", "glorp zib vex mip"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("alignment_inputs")
    files = write_set(folder / "data")
    pairs = read_parallel(files["src"], files["tgt"])
    files["forward"] = toy_transformer(folder / "fwd.pt", folder / "data", "src", "tgt", pairs, 1)
    swapped = [(tgt, src) for src, tgt in pairs]
    files["reverse"] = toy_transformer(folder / "rev.pt", folder / "data", "tgt", "src", swapped, 2)
    files["same"] = toy_transformer(folder / "same.pt", folder / "data", "src", "tgt", pairs, 3)
    other = [(a, b) for a, b in zip(UNKNOWN, reversed(UNKNOWN), strict=True)]
    files["other"] = toy_transformer(
        folder / "other.pt", folder / "elsewhere", "xx", "yy", other, 4
    )
    files["unknown"] = folder / "unknown.txt"
    files["unknown"].write_text("".join(line + "\n" for line in UNKNOWN), encoding="utf-8")
    return files


def warning_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def align_forward(setup: dict[str, Path], *options: object, tgt: str = "tgt"):
    """`attnseq align` of the forward model on the set's sources and `setup[tgt]`."""
    return invoke("align", setup["forward"], "--src", setup["src"], "--tgt", setup[tgt], *options)


def eval_against(setup: dict[str, Path], folder: Path, gold: Path, tgt: str = "tgt"):
    """`attnseq eval` of the forward model into FOLDER/eval, against `gold` for the set's
    sources and `setup[tgt]`."""
    sentences = ["--gold-src", str(setup["src"]), "--gold-tgt", str(setup[tgt])]
    return run_eval(setup["forward"], folder / "eval", "--gold", str(gold), *sentences)


@pytest.mark.parametrize(
    ("gold_text", "options", "words"),
    [
        (
            "0-0\n1-1\n0-0 99-1\n0-0\n",
            [],
            ["line 3", "link 99-1", "outside sentence 3", "2 source and 3 target words"],
        ),
        (
            "0-0\n1-1\n0-0 1?7\n0-0\n",
            [],
            ["line 3", "link 1?7", "2 source and 3 target words"],
        ),
        (
            "1 1 1 S\n4 7 1 S\n",
            ["--gold-format", "naacl"],
            ["line 2", "'4 7 1 S'", "outside sentence 4", "6 source and 5 target words"],
        ),
        (
            "0-0\n4-0\n0-0\n0-0\n",
            ["--gold-order", "tgt-src"],
            ["line 2", "link 4-0", "(target word, source word)", "4 target and 5 source words"],
        ),
    ],
    ids=["pharaoh", "pharaoh-possible", "naacl", "tgt-src"],
)
def test_align_refuses_gold_links_outside_their_sentence(
    setup, tmp_path, gold_text, options, words
) -> None:
    gold = tmp_path / "gold.txt"
    gold.write_text(gold_text, encoding="utf-8")
    out = tmp_path / "links.pharaoh"
    before = {path: path.read_bytes() for path in (gold, setup["src"], setup["tgt"])}
    result = align_forward(setup, "--gold", gold, "--out", out, *options)
    one_line_exit_2(result, f"--gold {gold}", *words)
    assert not out.exists()
    assert {path: path.read_bytes() for path in before} == before


def test_align_names_the_possible_file_of_a_link_outside(setup, tmp_path) -> None:
    possible = tmp_path / "possible.txt"
    possible.write_text("0-0\n1-1\n0-0\n0-0 5-9\n", encoding="utf-8")
    result = align_forward(setup, "--gold", setup["gold"], "--gold-possible", possible)
    one_line_exit_2(result, str(possible), "line 4", "link 5-9", "6 source and 5 target words")


def test_eval_refuses_naacl_gold_links_outside_their_sentence(setup, tmp_path) -> None:
    gold = tmp_path / "gold.naacl"
    gold.write_text("1 1 1 S\n2 2 9 P\n", encoding="utf-8")
    result = eval_against(setup, tmp_path, gold)
    one_line_exit_2(result, str(gold), "line 2", "'2 2 9 P'", "5 source and 4 target words")
    assert not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_reverse_model_of_the_same_languages_is_refused(setup, tmp_path) -> None:
    out = tmp_path / "links.pharaoh"
    result = align_forward(setup, "--reverse", setup["same"], "--out", out)
    one_line_exit_2(
        result, f"--reverse {setup['same']}", "same direction", "both read src and write tgt"
    )
    assert not out.exists()


@pytest.mark.slow
def test_reverse_model_of_the_same_vocabularies_is_refused(tmp_path) -> None:
    """Generated data names no languages; identical source and target vocabularies, in the
    same order, show the direction."""
    forward = untrained_checkpoint(tmp_path / "a.pt")
    reverse = untrained_checkpoint(tmp_path / "b.pt", "model.hidden=16")
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("march 3 1998\n", encoding="utf-8")
    tgt.write_text("1998-03-03\n", encoding="utf-8")
    result = invoke("align", forward, "--src", src, "--tgt", tgt, "--reverse", reverse)
    one_line_exit_2(result, "same direction", "same source and the same target vocabulary")


@pytest.mark.slow
def test_swapped_reverse_model_aligns_without_warning(setup, tmp_path) -> None:
    out = tmp_path / "links.pharaoh"
    result = align_forward(setup, "--reverse", setup["reverse"], "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stderr == "" and len(out.read_text().splitlines()) == len(SRC)


@pytest.mark.slow
def test_reverse_model_of_another_vocabulary_is_warned_about(setup, tmp_path) -> None:
    """Its data config names other languages (xx, yy) over other files: nothing shows its
    direction, so it aligns, with one warning giving the unknown-token rates."""
    out = tmp_path / "links.pharaoh"
    result = align_forward(setup, "--reverse", setup["other"], "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("\n") == 1 and len(warning_lines(result)) == 1
    warning = warning_lines(result)[0]
    assert "100.0% of the --tgt tokens (16 of 16)" in warning
    assert "the --reverse model's source vocabulary" in warning
    assert "100.0% of the --src tokens (17 of 17)" in warning
    assert "more than 50%" in warning
    assert out.exists()


def test_align_warns_about_a_target_the_model_cannot_read(setup, tmp_path) -> None:
    out = tmp_path / "links.pharaoh"
    result = align_forward(setup, "--out", out, tgt="unknown")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("\n") == 1 and len(warning_lines(result)) == 1
    warning = warning_lines(result)[0]
    assert "100.0% of the --tgt tokens (12 of 12) are unknown to the model's target" in warning
    assert "--src tokens" not in warning


def test_score_warns_about_a_target_the_model_cannot_read(setup, tmp_path) -> None:
    out = tmp_path / "scores.tsv"
    result = invoke(
        "score", setup["forward"], "--src", setup["src"], "--tgt", setup["unknown"], "--out", out
    )
    assert result.exit_code == 0, result.output
    assert len(warning_lines(result)) == 1 and "Traceback" not in result.output
    warning = warning_lines(result)[0]
    assert "100.0% of the target tokens (12 of 12)" in warning and "source tokens" not in warning
    assert len(out.read_text().splitlines()) == len(SRC)


def test_score_of_readable_text_gives_no_warning(setup, tmp_path) -> None:
    result = invoke("score", setup["forward"], "--src", setup["src"], "--tgt", setup["tgt"])
    assert result.exit_code == 0, result.output
    assert warning_lines(result) == []


@pytest.mark.slow
def test_eval_warns_about_alignment_sentences_the_model_cannot_read(setup, tmp_path) -> None:
    gold = tmp_path / "gold.txt"
    gold.write_text("0-0\n0-0\n0-0\n0-0\n", encoding="utf-8")
    result = eval_against(setup, tmp_path, gold, tgt="unknown")
    assert result.exit_code == 0, result.output
    assert len(warning_lines(result)) == 1
    assert "100.0% of the --gold-tgt tokens (12 of 12)" in warning_lines(result)[0]
