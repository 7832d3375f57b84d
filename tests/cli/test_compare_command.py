"""`attnseq compare`: two runs of the default task compared on their test split (decoded once,
then their eval results reused), the table with intervals and p-values, the length buckets, the
figure; the length-ratio buckets, word F-measure by training frequency and the attention's
entropy and AER; --format json holds the text tables' numbers; mistakes exit 2 with one line.
(`attnseq.compare` from Python: tests/api/test_compare.py.)"""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from helpers import compared_runs, decoding_threads, no_decoding, tiny_config
from typer.testing import CliRunner

import attnseq
from attnseq.analysis.comparison import Decode, load_system, split_pairs
from attnseq.cli.align_runner import AlignRequest, run_align
from attnseq.cli.app import app
from attnseq.evaluation.word_accuracy import word_accuracy_by_frequency, word_frequencies
from attnseq.training.run import run_training

runner = CliRunner()
FAST = ["--trials", "500", "--resamples", "200"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return compared_runs(tmp_path_factory)


def compare(*args: str, code: int = 0):
    result = runner.invoke(app, ["compare", *args])
    assert result.exit_code == code, result.output
    return result


@pytest.mark.slow
def test_two_runs_give_the_table_the_buckets_and_the_figure(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = runs
    result = compare(str(a), str(b), "--out", str(tmp_path / "cmp"), "--device", "cpu", *FAST)
    out = result.stdout
    for metric in ("bleu", "chrf", "ter", "exact_match", "length_ratio"):
        assert re.search(rf"^{metric}\s", out, re.M), out
    assert f"{a} (baseline)" in out
    assert re.search(
        rf"^bleu\s+{re.escape(str(b))}\s+[\d.]+\s+[\d.]+\s+[01]\.\d{{4}}\*?\s+[01]\.\d{{4}}",
        out,
        re.M,
    )
    assert "bleu by source length (words), 95% interval:" in out  # the split's sources
    assert (tmp_path / "cmp" / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert record["baseline"] == str(a) and record["sentences"] == 20
    evals = sorted(a.glob("eval/*/test.*/metrics.json")) + sorted(
        b.glob("eval/*/test.*/metrics.json")
    )
    assert len(evals) == 2  # each run decoded once, into its eval result folder
    written = [path.stat().st_mtime_ns for path in evals]
    compare(str(a), str(b), "--device", "cpu", *FAST)
    assert [path.stat().st_mtime_ns for path in evals] == written  # reused, not decoded again


@pytest.mark.slow
def test_json_numbers_equal_the_text_table(runs: tuple[Path, Path]) -> None:
    a, b = runs
    text = compare(str(b), str(a), "--device", "cpu", *FAST).stdout
    data = json.loads(compare(str(b), str(a), "--format", "json", "--device", "cpu", *FAST).stdout)
    assert data["baseline"] == str(b)
    for metric, values in data["systems"][str(a)].items():
        if metric == "length_ratio":
            assert re.search(rf"^length_ratio\s+{re.escape(str(a))}\s+{values:.3f}$", text, re.M)
            continue
        digits = 3 if metric == "exact_match" else 2
        row = (
            rf"^{metric}\s+{re.escape(str(a))}\s+{values['score']:.{digits}f}\s+"
            rf"{values['ci']:.{digits}f}\s+{values['p_bootstrap']:.4f}\*?\s+"
            rf"{values['p_randomization']:.4f}"
        )
        assert re.search(row, text, re.M), (row, text)
    first = data["buckets"]["scores"][str(b)][0]
    assert f"{first['score']:.2f} [{first['low']:.2f}, {first['high']:.2f}]" in text


def test_hypothesis_files_with_sources_and_a_named_baseline(tmp_path: Path) -> None:
    refs = [f"line {i} of the test set" for i in range(30)]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "src.txt").write_text("\n".join("w " * (1 + i % 6) for i in range(30)) + "\n")
    (tmp_path / "good.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "bad.txt").write_text("\n".join(r.replace("test", "x") for r in refs) + "\n")
    files = [str(tmp_path / name) for name in ("good.txt", "bad.txt")]
    result = compare(
        *files,
        "--baseline",
        files[1],
        "--ref",
        str(tmp_path / "ref.txt"),
        "--src",
        str(tmp_path / "src.txt"),
        "--format",
        "markdown",
        *FAST,
    )
    assert "bleu by source length (words)" in result.stdout
    assert f"| bleu | {files[1]} (baseline) |" in result.stdout
    good = re.search(
        rf"\| bleu \| {re.escape(files[0])} \| 100.00 \| [\d.]+ \| 0.0\d+\* \| 0.0\d+\* \|",
        result.stdout,
    )
    assert good, result.stdout


@pytest.mark.slow
def test_a_score_outside_its_interval_still_draws(tmp_path: Path) -> None:
    """Three sentences: a percentile interval of BLEU need not hold the score itself."""
    (tmp_path / "src.txt").write_text("June 5, 2001\n4 May 2001\nMarch 3rd, 1998\n")
    (tmp_path / "tgt.txt").write_text("2001-06-05\n2001-05-04\n1998-03-03\n")
    src, tgt = str(tmp_path / "src.txt"), str(tmp_path / "tgt.txt")
    out = tmp_path / "cmp"
    compare(tgt, src, "--ref", tgt, "--src", src, "--out", str(out), "--seed", "3", "--trials", "2")
    record = json.loads((out / "compare.json").read_text())
    buckets = record["buckets"]["scores"][tgt]
    assert any(not b["low"] <= b["score"] <= b["high"] for b in buckets), buckets
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mistakes_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\ny\n")
    (tmp_path / "b.txt").write_text("x\n")
    (tmp_path / "r.txt").write_text("x\ny\n")
    (tmp_path / "a.txt2").write_text("x\nz\n")
    a, b, r = (str(tmp_path / name) for name in ("a.txt", "b.txt", "r.txt"))
    cases = {
        "at least two systems": [a, "--ref", r],
        "hypothesis file not found": [a, str(tmp_path / "missing.txt"), "--ref", r],
        "1 lines but the references have 2": [a, b, "--ref", r],
        "--format must be one of": [a, a + "2", "--ref", r, "--format", "html"],
        "--seed must be >= 1": [a, str(tmp_path / "r.txt"), "--ref", r, "--seed", "0"],
        "no references": [a, r],
        "not a system": [a, str(tmp_path), "--ref", r],
        "checkpoint not found: " + str(tmp_path / "x.pt"): [a, str(tmp_path / "x.pt")],
        "is a file; give a folder": [a, a + "2", "--ref", r, "--out", r],
        "a system is given twice": [a, a, "--ref", r],
    }
    for message, args in cases.items():
        result = compare(*args, code=2)
        assert message in result.output, (message, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    usage = compare(a, a + "2", "--ref", r, "--threads", "many", code=2).output  # typer's usage
    assert "Invalid value for '--threads': 'many' is not a thread count" in usage


@pytest.mark.slow
def test_threads_are_set_for_the_decoding(
    runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = runs
    seen = decoding_threads(monkeypatch)
    compare(str(a), str(b), "--threads", "1", "--device", "cpu", "--no-attention", *FAST)
    assert seen == [1, 1]


def test_latex_tables(tmp_path: Path) -> None:
    refs = [f"row {i} of the set" for i in range(12)]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "a_sys.txt").write_text("\n".join(r.replace("set", "x") for r in refs) + "\n")
    (tmp_path / "b_sys.txt").write_text("\n".join(refs) + "\n")
    files = [str(tmp_path / name) for name in ("a_sys.txt", "b_sys.txt")]
    out = compare(*files, "--ref", str(tmp_path / "ref.txt"), "--format", "latex", *FAST).stdout
    assert out.count(r"\begin{tabular}") == 3 and out.count(r"\bottomrule") == 3
    ratio_head = r"system & ratio & $<$ 0.8 & 0.8-0.9 & 0.9-1.0 & 1.0-1.1 & 1.1-1.2 & $\geq$ 1.2"
    assert ratio_head in out
    assert re.search(r"b\\_sys\.txt & 1\.000 & 0 \(0\.0\\%\) & ", out), out
    assert r"metric & system & score & $\pm$ 95\% & p (bs) & p (ar) \\" in out
    assert re.search(r"^exact\\_match & .*b\\_sys\.txt & 1\.000 & 0\.000 & ", out, re.M), out


@pytest.mark.slow
def test_attention_word_accuracy_and_ratio_buckets_agree_in_json_and_text(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Two runs and a hypothesis file, gold links of the test split: each run's AER is that of
    `attnseq align --gold`; the word table counts the run's training targets; the hypothesis
    file has no attention, said once; the text shows the numbers of the JSON."""
    a, b = runs
    checkpoint = a / "checkpoints" / "best.pt"
    pairs = split_pairs(checkpoint, "test")
    src, ref, gold = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "gold.txt"
    src.write_text("".join(f"{source}\n" for source, _ in pairs))
    ref.write_text("".join(f"{target}\n" for _, target in pairs))
    gold.write_text("".join("0-0 1?0\n" if len(s.split()) > 1 else "0-0\n" for s, _ in pairs))
    copy = tmp_path / "copy.txt"
    outputs = load_system(b, Decode(device="cpu")).hypotheses  # decoded here when no test has yet
    copy.write_text("".join(f"{line}\n" for line in outputs))
    args = [str(a), str(b), str(copy), "--gold", str(gold), "--device", "cpu", *FAST]
    text = compare(*args).stdout
    data = json.loads(compare(*args, "--format", "json").stdout)

    aligned = run_align(AlignRequest(checkpoint, src, ref, gold=gold, device="cpu"))
    assert data["attention"][str(a)]["aer"]["aer"] == pytest.approx(aligned.scores["aer"])
    assert data["attention"][str(copy)]["entropy"] is None
    assert text.count(f"no attention measure for {copy}: no model (a hypothesis file)") == 1
    for name in (a, b):
        value = data["attention"][str(name)]
        cells = [f"{v:.3f}" for v in (value["entropy"], *value["bucket_entropy"])]
        row = r"\s+".join([re.escape(str(name)), *cells, f"{value['aer']['aer']:.4f}"])
        assert re.search(rf"^{row}$", text, re.M), (row, text)
        assert 0 < value["entropy"] < math.log(max(len(s) for s, _ in pairs))  # char pieces
    assert re.search(rf"^{re.escape(str(copy))}(\s+-)+$", text, re.M)

    words = data["word_accuracy"]
    assert words["frequencies_from"] == f"the training targets of {a}"
    train = [target for _, target in split_pairs(checkpoint, "train")]
    hyps = {str(a): next(a.glob("eval/*/test.*/hyps.txt")).read_text().splitlines()}
    _, expected = word_accuracy_by_frequency(
        hyps, ref.read_text().splitlines(), word_frequencies(train)
    )
    assert words["scores"][str(a)] == [dataclasses.asdict(s) for s in expected[str(a)]]
    unseen = words["scores"][str(b)][0]
    shown = f"{unseen['f_measure']:.3f} ({unseen['precision']:.3f}/{unseen['recall']:.3f})"
    assert re.search(
        rf"^0\s+{words['buckets'][0]['reference_words']}\s+.*{re.escape(shown)}", text, re.M
    )

    ratios = data["length_ratio_buckets"]
    assert sum(ratios["counts"][str(b)]) == 20 and sum(ratios["shares"][str(b)]) == 1.0
    cells = [f"{n} \\({100 * n / 20:.1f}%\\)" for n in ratios["counts"][str(b)]]
    ratio = data["systems"][str(b)]["length_ratio"]
    assert re.search(r"\s+".join([re.escape(str(b)), f"{ratio:.3f}", *cells]), text)


def test_without_training_targets_the_word_table_is_left_out_in_one_line(
    tmp_path: Path,
) -> None:
    refs = ["a b c", "d e"]
    (tmp_path / "r.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "x.txt").write_text("a b\nd e f\n")
    (tmp_path / "train.txt").write_text("a a b\nd\nz z z\n")  # other line count: fine
    files = [str(tmp_path / "r.txt"), str(tmp_path / "x.txt")]
    out = compare(*files, "--ref", files[0], *FAST).stdout
    assert "word F-measure (precision/recall)" not in out
    note = [line for line in out.splitlines() if line.startswith("word F-measure")]
    assert note == [
        "word F-measure by training frequency: left out, no training targets (give "
        "--train-ref, or compare a checkpoint whose training data this machine can read)"
    ]
    assert "attention: left out, no system is a checkpoint" in out
    given = compare(
        *files,
        "--ref",
        files[0],
        "--train-ref",
        str(tmp_path / "train.txt"),
        "--format",
        "json",
        *FAST,
    ).stdout
    words = json.loads(given)["word_accuracy"]
    assert words["frequencies_from"] == "the given training targets"
    # reference words: c, e unseen; b, d once; a twice
    assert [b["reference_words"] for b in words["buckets"][:3]] == [2, 2, 1]
    assert [s["matches"] for s in words["scores"][files[1]][:3]] == [1, 2, 1]


def test_mistakes_of_the_new_options_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\ny\n")
    (tmp_path / "b.txt").write_text("x\nz\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n \n")
    files = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--ref", str(tmp_path / "a.txt")]
    cases = {
        f"--gold file not found: {tmp_path / 'gone.txt'}": ["--gold", str(tmp_path / "gone.txt")],
        "--train-ref file " + str(tmp_path / "empty.txt") + " is empty": [
            "--train-ref",
            str(tmp_path / "empty.txt"),
        ],
        "--train-ref holds no words ": ["--train-ref", str(tmp_path / "blank.txt")],
        "--gold scores the attention that --no-attention leaves out": [
            "--gold",
            str(tmp_path / "a.txt"),
            "--no-attention",
        ],
        "gold links count the words of the test sources: give --src": [
            "--gold",
            str(tmp_path / "a.txt"),
        ],
    }
    for message, args in cases.items():
        result = compare(*files, *args, code=2)
        assert message.strip() in result.output, (message, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_test_sizes_are_refused_before_any_checkpoint_decodes(
    runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    no_decoding(monkeypatch)
    a, b = (str(run) for run in runs)
    assert "--seed must be >= 1" in compare(a, b, "--seed", "0", code=2).output
    assert "--trials must be >= 1" in compare(a, b, "--trials", "0", code=2).output


@pytest.mark.slow
def test_runs_on_other_test_sets_are_refused_with_what_to_compare(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    other_seed = tmp_path / "other_seed"  # the default task draws its test set from the seed
    run_training(tiny_config("seed=7"), other_seed)
    output = compare(str(runs[0]), str(other_seed), "--no-attention", *FAST, code=2).output
    assert f"{other_seed}: its references differ from the others'" in output
    assert "compare runs of one seed, or a sweep folder to pool seeds" in output
    assert len([line for line in output.splitlines() if line.startswith("error")]) == 1, output


@pytest.mark.slow
def test_the_text_and_json_name_the_decoding_the_test_set_and_the_signature(
    runs: tuple[Path, Path],
) -> None:
    a, b = runs
    args = [str(a), str(b), "--device", "cpu", "--no-attention", *FAST]
    text = compare(*args).stdout
    record = json.loads(compare(*args, "--format", "json").stdout)
    folder = next(a.glob("eval/*/test.greedy"))
    assert f"{a}: greedy, the eval result {folder}" in text
    assert "test set: the test split, 20 sentences" in text
    assert "BLEU: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in text
    assert record["decoding"][str(a)]["name"] == "greedy"
    assert record["decoding"][str(a)]["eval_folder"] == str(folder)
    assert record["test_set"]["split"] == "test" and record["test_set"]["sentences"] == 20
    assert record["signatures"]["bleu"] in text
    assert record["scope"].startswith("one run per system")


@pytest.mark.slow
def test_beam_and_length_penalty_decode_as_eval_does_and_reuse_its_result(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = runs
    done = runner.invoke(
        app, ["eval", str(a), "--beam", "2", "--length-penalty", "0.5", "--device", "cpu"]
    )
    assert done.exit_code == 0, done.output
    folder = next(a.glob("eval/*/test.beam2-lp0.5"))
    written = (folder / "metrics.json").stat().st_mtime_ns
    args = [str(a), str(b), "--beam", "2", "--length-penalty", "0.5", "--device", "cpu"]
    record = json.loads(compare(*args, "--no-attention", "--format", "json", *FAST).stdout)
    assert record["decoding"][str(a)] == {
        "kind": "checkpoint",
        "name": "beam2-lp0.5",
        "eval_folder": str(folder),
        "reused": True,
    }
    assert record["decoding"][str(b)]["name"] == "beam2-lp0.5"
    assert record["decoding"][str(b)]["reused"] is False  # decoded now, kept for the next time
    assert (folder / "metrics.json").stat().st_mtime_ns == written
    result = attnseq.compare(
        [a, b], beam=2, length_penalty=0.5, resamples=20, trials=20, device="cpu", attention=False
    )
    assert result.decoding[str(b)].reused is True
    for mistake, message in (
        (["--beam", "0"], "--beam must be >= 1, got 0"),
        (["--length-penalty", "nan"], "--length-penalty must be a finite"),
    ):
        output = compare(str(a), str(b), *mistake, code=2).output
        assert message in output, output
    (tmp_path / "x.txt").write_text("x\n")
    (tmp_path / "y.txt").write_text("y\n")
    files = [str(tmp_path / "x.txt"), str(tmp_path / "y.txt"), "--ref", str(tmp_path / "x.txt")]
    output = compare(*files, "--beam", "2", code=2).output
    assert "--beam decodes run directories and checkpoints" in output
