"""`attnseq compare`: two runs of the default task compared on their test split (decoded once,
then their eval results reused), the table with intervals and p-values, the length buckets, the
figure; --format json holds the text table's numbers; mistakes exit 2 with one line; the same
from Python as `attnseq.compare`."""

import json
import re
from pathlib import Path

import pytest
from helpers import tiny_config
from typer.testing import CliRunner

import attnseq
from attnseq.cli.app import app
from attnseq.training.run import run_training

runner = CliRunner()
FAST = ["--trials", "500", "--resamples", "200"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny runs of the default task (dates) on the same data: 6 updates, and 30 at a
    higher learning rate."""
    folders = []
    for name, overrides in (("short", []), ("longer", ["trainer.max_steps=30", "optim.lr=0.01"])):
        run_dir = tmp_path_factory.mktemp(name)
        run_training(tiny_config(*overrides), run_dir)
        folders.append(run_dir)
    return folders[0], folders[1]


def compare(*args: str, code: int = 0):
    result = runner.invoke(app, ["compare", *args])
    assert result.exit_code == code, result.output
    return result


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
        row = (rf"^{metric}\s+{re.escape(str(a))}\s+{values['score']:.{digits}f}\s+"
               rf"{values['ci']:.{digits}f}\s+{values['p_bootstrap']:.4f}\*?\s+"
               rf"{values['p_randomization']:.4f}")  # fmt: skip
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
    result = compare(*files, "--baseline", files[1], "--ref", str(tmp_path / "ref.txt"),
                     "--src", str(tmp_path / "src.txt"), "--format", "markdown", *FAST)  # fmt: skip
    assert "bleu by source length (words)" in result.stdout
    assert f"| bleu | {files[1]} (baseline) |" in result.stdout
    good = re.search(
        rf"\| bleu \| {re.escape(files[0])} \| 100.00 \| [\d.]+ \| 0.0\d+\* \| 0.0\d+\* \|",
        result.stdout,
    )
    assert good, result.stdout


def test_mistakes_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\ny\n")
    (tmp_path / "b.txt").write_text("x\n")
    (tmp_path / "r.txt").write_text("x\ny\n")
    (tmp_path / "a.txt2").write_text("x\nz\n")
    a, b, r = (str(tmp_path / name) for name in ("a.txt", "b.txt", "r.txt"))
    cases = {
        "at least two systems": [a, "--ref", r],
        "no such file": [a, str(tmp_path / "missing.txt"), "--ref", r],
        "1 lines but the references have 2": [a, b, "--ref", r],
        "--format must be one of": [a, a + "2", "--ref", r, "--format", "html"],
        "--seed must be >= 1": [a, str(tmp_path / "r.txt"), "--ref", r, "--seed", "0"],
        "no references": [a, r],
        "not a system": [a, str(tmp_path), "--ref", r],
        "checkpoint " + str(tmp_path / "x.pt") + ": no such file": [a, str(tmp_path / "x.pt")],
        "a file, not a folder": [a, a + "2", "--ref", r, "--out", r],
        "a system is given twice": [a, a, "--ref", r],
    }
    for message, args in cases.items():
        result = compare(*args, code=2)
        assert message in result.output, (message, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_python_api(runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = runs
    result = attnseq.compare([a, b], seed=3, resamples=100, trials=200, device="cpu")
    assert isinstance(result, attnseq.Comparison)
    assert repr(result).startswith(f"<Comparison of 2 systems on 20 sentences, bleu: {a}: ")
    assert "\n" not in repr(result)
    assert result.scores[str(b)]["bleu"].p_bootstrap is not None
    assert result.save_figure(tmp_path / "f.png").is_file()
    with pytest.raises(TypeError, match="systems must be a list of paths"):
        attnseq.compare(str(a))


def test_latex_tables(tmp_path: Path) -> None:
    refs = [f"row {i} of the set" for i in range(12)]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "a_sys.txt").write_text("\n".join(r.replace("set", "x") for r in refs) + "\n")
    (tmp_path / "b_sys.txt").write_text("\n".join(refs) + "\n")
    files = [str(tmp_path / name) for name in ("a_sys.txt", "b_sys.txt")]
    out = compare(*files, "--ref", str(tmp_path / "ref.txt"), "--format", "latex", *FAST).stdout
    assert out.count(r"\begin{tabular}") == 2 and out.count(r"\bottomrule") == 2
    assert r"metric & system & score & $\pm$ 95\% & p (bs) & p (ar) \\" in out
    assert re.search(r"^exact\\_match & .*b\\_sys\.txt & 1\.000 & 0\.000 & ", out, re.M), out
