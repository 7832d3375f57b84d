"""studies/compare_summarizers.py --hierarchical --seeds --figure: its cost and table helpers,
and a run on a generated DialogSum-shaped corpus (a stand-in ATTNSEQ_DATA, so no real data is
needed) with tiny models and two updates: the flat, hierarchical and hierarchical
pointer-generator rows over two seeds, their training cost relative to flat attention, and the
segment attention figure (`-m slow`)."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, TINY_SUMMARIZER, load_script

SCRIPT = REPO / "studies" / "compare_summarizers.py"
compare = load_script("studies/compare_summarizers.py")
TINY = [*TINY_SUMMARIZER, "data.spm_vocab_size=120", "optim.coverage_start_step=1"]


def fake_dialogsum(root: Path) -> None:
    """DialogSum's layout (dialogsum/{train,valid,test}.jsonl with src/tgt) and turn format."""
    rng = random.Random(0)
    words = [
        "hello",
        "tea",
        "cake",
        "want",
        "where",
        "the",
        "shop",
        "is",
        "open",
        "today",
        "please",
        "thanks",
        "fine",
    ]
    folder = root / "dialogsum"
    folder.mkdir(parents=True)
    for split, count in (("train", 60), ("valid", 6), ("test", 6)):
        rows = []
        for _ in range(count):
            turns = [
                f"#Person{t % 2 + 1}#: {' '.join(rng.choices(words, k=5))}."
                for t in range(rng.randint(2, 4))
            ]
            rows.append({"src": "\n".join(turns), "tgt": " ".join(rng.choices(words, k=4))})
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.slow  # eight tiny trainings in subprocesses: 1-5 minutes
def test_hierarchical_rows_over_two_seeds_with_cost_and_figure(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    fake_dialogsum(data)
    command = [
        sys.executable,
        str(SCRIPT),
        "--out",
        str(out),
        "--datasets",
        "dialogsum",
        "--hierarchical",
        "--seeds",
        "1",
        "2",
        "--figure",
        "--",
        *TINY,
    ]
    env = {**__import__("os").environ, "ATTNSEQ_DATA": str(data)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((out / "results.json").read_text())["dialogsum"]
    assert [row["name"] for row in rows[1:]] == [
        "attention",
        "pointer-generator + coverage",
        "hierarchical",
        "hierarchical + pointer-generator + coverage",
    ]
    for row in rows[1:]:
        assert [seed["seed"] for seed in row["seeds"]] == [1, 2]
        mean = sum(seed["rouge_l"] for seed in row["seeds"]) / 2
        assert row["rouge_l"] == pytest.approx(mean)
        assert row["seconds_per_epoch"] > 0
    hierarchical_pg = rows[4]["seeds"][0]["command"]
    assert "config=dialogsum_pointer_generator" in hierarchical_pg
    assert "model.attention.hierarchy=sentence" in hierarchical_pg and "seed=1" in hierarchical_pg
    assert "config=dialogsum_hierarchical" in rows[3]["seeds"][1]["command"]
    assert (out / "dialogsum_hierarchical_pointer_generator-seed2" / "metrics.json").is_file()
    summary = (out / "summary.md").read_text()
    assert "| attention |" in summary and "| 1.00x |" in summary
    assert (out / "segment_attention_dialogsum.png").stat().st_size > 0


def test_seconds_per_epoch_counts_the_partial_epoch(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "[x][attnseq][INFO] - training: 900 examples, 40 batches per epoch (padding 3%)\n"
    )
    progress = {"epoch": 2, "batch_in_epoch": 10, "train_seconds": 90.0}
    assert compare.seconds_per_epoch(tmp_path, progress) == pytest.approx(90.0 / 2.25)
    assert compare.seconds_per_epoch(tmp_path / "missing", progress) is None


def test_hierarchical_rows_use_the_packaged_experiment_or_the_switch() -> None:
    plain, with_pointer = compare.HIERARCHICAL_MODELS
    assert compare.experiment_of(plain, "dialogsum") == ("dialogsum_hierarchical", [])
    assert compare.experiment_of(plain, "aeslc") == ("aeslc_rnn_attention", [compare.HIERARCHY])
    assert compare.experiment_of(with_pointer, "aeslc") == (
        "aeslc_pointer_generator",
        [compare.HIERARCHY],
    )


def test_the_table_gives_the_cost_relative_to_flat_attention() -> None:
    scores = {"rouge1": 1.0, "rouge2": 1.0, "rouge_l": 1.0, "repeated_trigrams": 0.0}
    rows = [
        {"name": "attention", "command": "a", "seconds_per_epoch": 200.0, **scores},
        {"name": "hierarchical", "command": "h", "seconds_per_epoch": 250.0, **scores},
    ]
    text = compare.table("dialogsum", rows)
    assert "| 200.0 | 1.00x |" in text and "| 250.0 | 1.25x |" in text


def test_models_chooses_rows_by_their_run_names() -> None:
    parse = __import__("argparse").Namespace
    every = compare.chosen_models(parse(hierarchical=True, models=None))
    assert [compare.row_key(model) for model in every] == [
        "rnn_attention",
        "pointer_generator",
        "hierarchical",
        "hierarchical_pointer_generator",
    ]
    chosen = compare.chosen_models(
        parse(hierarchical=True, models=["hierarchical_pointer_generator", "rnn_attention"])
    )
    assert [model.name for model in chosen] == [
        "attention",
        "hierarchical + pointer-generator + coverage",
    ]
    with pytest.raises(SystemExit, match="unknown \\['hierarchical'\\]"):
        compare.chosen_models(parse(hierarchical=False, models=["hierarchical"]))
