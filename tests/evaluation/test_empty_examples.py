"""Examples with an empty source or target follow one rule in every split: training drops them,
evaluation keeps their line (an empty source gets the empty hypothesis, so hypothesis files stay
line-aligned with the input) but leaves them out of the loss and the metrics, counted as
SPLIT/skipped_empty. Validation, the final test evaluation and `attnseq eval` agree."""

import json
from pathlib import Path

import pytest
from helpers import tiny_config

from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint
from attnseq.training.run import run_training

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]
EMPTY_SOURCE, EMPTY_TARGET = 1, 3  # line numbers (0-based) of the empty examples in each split


def split_pairs(n: int, offset: int) -> list[tuple[str, str]]:
    """Reversal pairs with an empty source at line 1 and an empty target at line 3."""
    pairs = []
    for i in range(n):
        words = [WORDS[(i * 3 + offset + k) % len(WORDS)] for k in range(2 + i % 3)]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    pairs[EMPTY_SOURCE] = ("", pairs[EMPTY_SOURCE][1])
    pairs[EMPTY_TARGET] = (pairs[EMPTY_TARGET][0], "")
    return pairs


def write_dataset(root: Path, file_format: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """train/valid/test in `file_format` under root, this machine's data root for the test (so
    eval reads the checkpoint's files there); the overrides that select them."""
    monkeypatch.setenv("ATTNSEQ_DATA", str(root))
    root.mkdir(parents=True)
    for number, (split, n) in enumerate((("train", 40), ("valid", 7), ("test", 6))):
        pairs = split_pairs(n, number)
        if file_format == "tsv":
            lines = "".join(f"{src}\t{tgt}\n" for src, tgt in pairs)
            (root / f"{split}.tsv").write_text(lines, encoding="utf-8")
        else:
            for side, lang in ((0, "src"), (1, "tgt")):
                text = "".join(pair[side] + "\n" for pair in pairs)
                (root / f"{split}.{lang}").write_text(text, encoding="utf-8")
    suffix = ".tsv" if file_format == "tsv" else ""
    return [
        "data.source=local",
        f"data.format={file_format}",
        f"data.root={root}",
        "data.name=toy",
        "data.tokenizer=word",
        *(f"data.splits.{split}={split}{suffix}" for split in ("train", "valid", "test")),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("file_format", "family"), [("tsv", "rnn"), ("parallel", "transformer")])
def test_empty_examples_in_every_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_format: str, family: str
) -> None:
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    overrides = write_dataset(tmp_path / "data", file_format, monkeypatch)
    extra = ["optim.warmup_steps=2"] if family == "transformer" else []
    cfg = tiny_config(*overrides, f"model.family={family}", "trainer.max_steps=3", *extra)
    run_dir = tmp_path / "run"
    metrics = run_training(cfg, run_dir)

    written = json.loads((run_dir / "metrics.json").read_text())
    assert written["test/skipped_empty"] == 2 == metrics["test/skipped_empty"]
    hyps = (run_dir / "hyps" / "test.txt").read_text(encoding="utf-8").split("\n")
    assert len(hyps) == 6 + 1  # one line per test example (and the final newline)
    assert hyps[EMPTY_SOURCE] == ""  # an empty source: no output

    again = evaluate_checkpoint(run_dir / "checkpoints" / "best.pt", "test", out_dir=tmp_path / "e")
    assert again == {key: value for key, value in written.items() if key.startswith("test/")}
    eval_hyps = (again.result.folder / "hyps.txt").read_text(encoding="utf-8").split("\n")
    assert eval_hyps == hyps
    refs = (again.result.folder / "refs.txt").read_text(encoding="utf-8").split("\n")
    assert refs[EMPTY_TARGET] == "" and len(refs) == len(hyps)

    valid = evaluate_checkpoint(run_dir / "checkpoints" / "best.pt", "valid", out_dir=tmp_path)
    assert valid["valid/skipped_empty"] == 2
    assert all(value == value for value in valid.values())  # no NaN from an empty example


@pytest.mark.slow
def test_scores_leave_the_empty_examples_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same model scores a split with its empty examples as it scores the split without
    them, apart from the count."""
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    overrides = write_dataset(tmp_path / "data", "tsv", monkeypatch)
    run_dir = tmp_path / "run"
    run_training(tiny_config(*overrides, "trainer.max_steps=2"), run_dir)
    test_file = tmp_path / "data" / "test.tsv"
    lines = test_file.read_text(encoding="utf-8").splitlines(keepends=True)
    clean = tmp_path / "clean.tsv"
    kept = [line for n, line in enumerate(lines) if n not in (EMPTY_SOURCE, EMPTY_TARGET)]
    clean.write_text("".join(kept), encoding="utf-8")

    checkpoint = run_dir / "checkpoints" / "best.pt"
    with_empty = evaluate_checkpoint(checkpoint, str(test_file), out_dir=tmp_path / "a")
    without = evaluate_checkpoint(checkpoint, str(clean), out_dir=tmp_path / "b")
    assert with_empty.pop("test_tsv/skipped_empty") == 2
    assert "clean_tsv/skipped_empty" not in without
    assert {key.split("/")[1]: value for key, value in with_empty.items()} == pytest.approx(
        {key.split("/")[1]: value for key, value in without.items()}
    )
    hyps = (with_empty.result.folder / "hyps.txt").read_text(encoding="utf-8").splitlines()
    clean_hyps = (without.result.folder / "hyps.txt").read_text(encoding="utf-8")
    assert [h for n, h in enumerate(hyps) if n not in (EMPTY_SOURCE, EMPTY_TARGET)] == (
        clean_hyps.splitlines()
    )
