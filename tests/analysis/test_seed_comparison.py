"""Configurations compared over seeds: a sweep folder's runs grouped by configuration without
the seed and named by what differs, the seed pairs, k̂ of the per-seed tests, ASO's verdict on
made-up scores (better, not significant, worse; the same with the same seed), `attnseq compare`
of a made-up sweep (runs copied from the shared tiny checkpoints with other seeds and configs,
each decoded once) in every format and its figure, a group beside single runs, `attnseq
sweep-report --significance`, and the mistakes that exit 2 before any decoding."""

import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from attnseq.analysis.comparison import System
from attnseq.analysis.seed_comparison import (
    BETTER,
    NOT_SIGNIFICANT,
    SAME_SEED,
    SORTED_ORDER,
    TOO_FEW_SEEDS,
    WORSE,
    aso_epsilons,
    aso_verdict,
    compare_paths,
    group_verdict,
    pair_runs,
    significant_pairs,
)
from attnseq.analysis.seed_groups import SeedRun, group_names, plan_groups
from attnseq.cli.app import app
from attnseq.errors import UserError
from attnseq.io.checkpoint import load_checkpoint, save_checkpoint

runner = CliRunner()
FAST = ["--resamples", "30", "--trials", "100", "--device", "cpu"]


def fake_run(
    source: Path, folder: Path, seed: int, overrides: list[str] | None, **changes: Any
) -> Path:
    """A run directory at `folder` holding the checkpoint of the run `source` with its
    config's seed (and dotted keys `changes`, `__` for the dots) changed; its
    .hydra/overrides.yaml when `overrides` are given; the source's metrics.json."""
    payload = load_checkpoint(source / "checkpoints" / "best.pt")
    config = payload["config"]
    config["seed"] = seed
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value
    kept = {key: value for key, value in payload.items() if key not in ("format", "version")}
    save_checkpoint(folder / "checkpoints" / "best.pt", kept)
    if overrides is not None:
        (folder / ".hydra").mkdir()
        listed = yaml.safe_dump([*overrides, f"seed={seed}"])
        (folder / ".hydra" / "overrides.yaml").write_text(listed)
    shutil.copy(source / "metrics.json", folder / "metrics.json")
    return folder


@pytest.fixture(scope="module")
def sweep(
    tmp_path_factory: pytest.TempPathFactory,
    trained_rnn_checkpoint: Path,
    trained_transformer_checkpoint: Path,
) -> Path:
    """A multirun folder of four jobs: the tiny trained RNN and transformer (overrides
    model.family=rnn and =transformer), seeds 1 and 2 each; its runs are decoded by the first
    test that compares them."""
    root = tmp_path_factory.mktemp("seeds") / "multirun"
    sources = {
        "rnn": trained_rnn_checkpoint.parents[1],
        "transformer": trained_transformer_checkpoint.parents[1],
    }
    job = 0
    for family, source in sources.items():
        for seed in (1, 2):
            fake_run(source, root / str(job), seed, [f"model.family={family}"])
            job += 1
    (root / "multirun.yaml").write_text("{}\n")
    return root


def compare(*args: str, code: int = 0):
    result = runner.invoke(app, ["compare", *args])
    assert result.exit_code == code, result.output
    return result


def seed_run(name: str, seed: int | None) -> SeedRun:
    return SeedRun(seed, System(name, []))


# ------------------------------------------------------------------------------ the groups
def test_runs_are_grouped_by_config_without_the_seed(sweep: Path) -> None:
    groups = plan_groups([sweep])
    assert [group.name for group in groups] == ["model.family=rnn", "model.family=transformer"]
    assert [[member.seed for member in group.members] for group in groups] == [[1, 2], [1, 2]]
    assert [member.path for member in groups[1].members] == [sweep / "2", sweep / "3"]


def test_keys_that_do_not_change_training_join_a_group_and_names_fall_back_to_the_config(
    trained_rnn_checkpoint: Path, tmp_path: Path
) -> None:
    source = trained_rnn_checkpoint.parents[1]
    lr = load_checkpoint(trained_rnn_checkpoint)["config"]["optim"]["lr"]
    sweep = tmp_path / "sweep"
    fake_run(source, sweep / "a" / "0", 1, None)
    fake_run(source, sweep / "a" / "1", 2, None, trainer__threads=2, data__root="/elsewhere")
    fake_run(source, sweep / "b" / "0", 3, None, optim__lr=lr * 2)
    groups = plan_groups([sweep])
    assert [group.name for group in groups] == [f"optim.lr={lr}", f"optim.lr={lr * 2}"]
    assert [[member.seed for member in group.members] for group in groups] == [[1, 2], [3]]
    with pytest.raises(UserError, match="is given twice"):
        plan_groups([sweep, sweep / "a" / "0"])


def test_group_names_use_the_overrides_that_tell_the_groups_apart() -> None:
    configs = [{"model.x": '"a"', "optim.lr": "0.1"}, {"model.x": '"b"', "optim.lr": "0.1"}]
    overrides = [
        {"model": "rnn_luong", "optim.lr": "0.1"},
        {"model": "transformer", "optim.lr": "0.1"},
    ]
    assert group_names(configs, overrides) == ["model=rnn_luong", "model=transformer"]
    # overrides alike, or missing for a group: the differing configuration keys
    same = [{"optim.lr": "0.1"}, {"optim.lr": "0.1"}]
    assert group_names(configs, same) == ["model.x=a", "model.x=b"]
    assert group_names(configs, [overrides[0], None]) == ["model.x=a", "model.x=b"]


# ------------------------------------------------------------------------------ statistics
def test_pairs_by_seed_then_in_sorted_order() -> None:
    baseline = [seed_run(f"a{seed}", seed) for seed in (3, 1, 2)]
    runs = [seed_run(f"b{seed}", seed) for seed in (4, 2, 3)]
    pairs = [(a.seed, b.seed, how) for a, b, how in pair_runs(baseline, runs)]
    assert pairs == [(2, 2, SAME_SEED), (3, 3, SAME_SEED), (1, 4, SORTED_ORDER)]
    others = [seed_run("c6", 6), seed_run("c5", 5), seed_run("file", None)]
    pairs = [(a.seed, b.seed, how) for a, b, how in pair_runs(baseline, others)]
    assert pairs == [(1, 5, SORTED_ORDER), (2, 6, SORTED_ORDER), (3, None, SORTED_ORDER)]


def test_significant_pairs_is_the_partial_conjunction_count() -> None:
    # p^(u/k) = (k - u + 1) p_(u), non-decreasing: 0.03, 0.04, 0.04 -> all three
    assert significant_pairs([0.04, 0.01, 0.02]) == 3
    # 0.003, then 2 x 0.03 = 0.06 > 0.05: one (the running maximum keeps u = 3 out)
    assert significant_pairs([0.001, 0.03, 0.03]) == 1
    # Dror et al.'s example: 6 x 0.001, then 5 x 0.019 = 0.095
    assert significant_pairs([0.168, 0.297, 0.357, 0.019, 0.218, 0.001]) == 1
    assert significant_pairs([0.2, 0.3]) == 0 and significant_pairs([]) == 0


@pytest.mark.slow
def test_aso_calls_better_not_significant_and_worse_reproducibly() -> None:
    low, high = [28.1, 29.0, 29.6], [31.2, 32.0, 33.1]
    state = np.random.get_state()
    better = aso_epsilons(high, low, seed=7, iterations=60)
    assert better[0] < 0.2 < better[1] and aso_verdict(*better) == BETTER
    worse = aso_epsilons(low, high, seed=7, iterations=60)
    assert aso_verdict(*worse) == WORSE
    same = aso_epsilons(low, low, seed=7, iterations=60)
    assert min(same) >= 0.2 and aso_verdict(*same) == NOT_SIGNIFICANT
    mixed = [28.0, 31.0, 29.5]
    assert aso_epsilons(mixed, low, seed=7, iterations=60) == aso_epsilons(
        mixed, low, seed=7, iterations=60
    )  # the same seed, the same ε
    assert all(a == b for a, b in zip(np.random.get_state()[1], state[1], strict=True))


def test_group_verdict_counts_pairs_in_the_mean_direction_and_turns_ter_round() -> None:
    # TER: lower is better, so the lower group is better
    pairs = [(-10.0, 0.001), (-10.0, 0.01), (+1.0, 0.001)]
    verdict = group_verdict("ter", [60.0, 61.0, 62.0], [50.0, 51.0, 52.0], pairs, iterations=40)
    assert verdict.call == BETTER and verdict.eps_better is not None
    # the third pair differs the other way: it counts as p = 1 -> 2 of 3
    assert (verdict.significant, verdict.tested) == (2, 3)
    one_seed = group_verdict("bleu", [20.0, 21.0], [25.0], [(4.0, 0.001)], iterations=40)
    assert one_seed.call == TOO_FEW_SEEDS and one_seed.eps_better is None
    assert (one_seed.significant, one_seed.tested) == (1, 1)


# --------------------------------------------------------------------------- the command
@pytest.mark.slow
def test_compare_of_a_sweep_folder_in_every_format(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    text = compare(str(sweep), "--out", str(out), *FAST).stdout
    header = re.search(
        r"^metric\s+group\s+seeds\s+mean ± sd\s+k̂/k\s+ε\(B>A\)\s+ε\(A>B\)\s+verdict", text, re.M
    )
    assert header, text
    row = re.search(
        r"^bleu\s+model\.family=transformer\s+1,2\s+[\d.]+ ± [\d.]+\s+\d/2\s+"
        r"[\d.]+\s+[\d.]+\s+(better|worse|not significant)$",
        text,
        re.M,
    )
    assert row, text
    assert "model.family=rnn (baseline)" in text and "Almost Stochastic Order" in text
    assert "Word F-measure by training frequency and the attention table" in text
    assert re.search(r"^model\.family=transformer\s+1\s+1\s+seed\s+[+-][\d.]+ \(", text, re.M)
    record = json.loads((out / "compare.json").read_text())
    assert record["baseline"] == "model.family=rnn" and record["settings"]["epsilon"] == 0.2
    group = record["groups"]["model.family=transformer"]
    assert group["seeds"] == [1, 2] and group["metrics"]["bleu"]["scores"] == [
        run["metrics"]["bleu"]["score"] for run in group["runs"]
    ]
    assert all(run["metrics"]["bleu"]["ci"] >= 0 for run in group["runs"])
    verdict = group["against_baseline"]["bleu"]
    assert verdict["verdict"] == row.group(1) and verdict["tested_pairs"] == 2
    assert [pair["paired_by"] for pair in group["pairs"]] == ["seed", "seed"]
    assert 0 < group["pairs"][0]["metrics"]["bleu"]["p_randomization"] <= 1
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    evals = sorted(sweep.glob("*/eval/*/test.*/metrics.json"))
    assert len(evals) == 4  # each run decoded once
    written = [path.stat().st_mtime_ns for path in evals]
    result = compare_paths([sweep], device="cpu", resamples=30, trials=100)
    assert [path.stat().st_mtime_ns for path in evals] == written  # then reused
    assert result.verdicts["model.family=transformer"]["bleu"].call == row.group(1)
    markdown, latex = result.render("markdown"), result.render("latex")
    assert "| ε(B>A) | ε(A>B) | verdict |" in markdown
    assert f"| {row.group(1)} |" in markdown
    lines = markdown.splitlines()
    for line, following in zip(lines, lines[1:], strict=False):
        if line.startswith("|") and following.strip():  # each table ends at a blank line
            assert following.startswith("|"), following
    assert r"$\varepsilon$(B$>$A) & $\varepsilon$(A$>$B) & verdict \\" in latex
    assert f"& {row.group(1)} \\\\" in latex and r"model.family=rnn (baseline)" in latex


@pytest.mark.slow
def test_a_group_beside_a_single_run_with_a_named_baseline(
    sweep: Path, trained_rnn_checkpoint: Path, tmp_path: Path
) -> None:
    # another configuration: the same one with seed 2 would be the sweep's run 1 again
    source = trained_rnn_checkpoint.parents[1]
    single = fake_run(source, tmp_path / "single", 2, None, optim__lr=0.5)
    args = [str(sweep), str(single), "--baseline", "model.family=transformer", "--format", "json"]
    record = json.loads(compare(*args, *FAST).stdout)
    assert record["baseline"] == "model.family=transformer"
    assert list(record["groups"]) == ["model.family=transformer", "model.family=rnn", str(single)]
    alone = record["groups"][str(single)]
    assert alone["seeds"] == [2] and alone["metrics"]["bleu"]["sd"] is None
    assert alone["against_baseline"]["bleu"]["verdict"] == TOO_FEW_SEEDS
    # seed 2 of the baseline is there: the single run is paired with it
    assert [
        (pair["seed"], pair["baseline_seed"], pair["paired_by"]) for pair in alone["pairs"]
    ] == [(2, 2, "seed")]


@pytest.mark.slow
def test_mistakes_exit_2_with_one_line_before_decoding(
    sweep: Path, trained_rnn_checkpoint: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    (empty / "0").mkdir(parents=True)
    lone = tmp_path / "lone"
    fake_run(trained_rnn_checkpoint.parents[1], lone / "0", 1, ["model.family=rnn"])
    fake_run(trained_rnn_checkpoint.parents[1], lone / "1", 2, ["model.family=rnn"])
    gru = [str(sweep), "--baseline", "model.family=gru"]
    cases = {
        "no run directories below it": [str(empty)],
        "matches no group. The groups: model.family=rnn; model.family=transformer": gru,
        "needs at least two groups, got one: " + str(lone) + " (seeds 1, 2)": [str(lone)],
        "--resamples must be >= 1": [str(sweep), "--resamples", "0"],
        "--gold and --train-ref score single systems": [str(sweep), "--gold", str(empty)],
    }
    for message, args in cases.items():
        result = compare(*args, code=2)
        assert message in result.output, (message, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert not list(lone.glob("*/eval")) and not list(empty.rglob("eval"))


@pytest.mark.slow
def test_sweep_report_significance(sweep: Path) -> None:
    args = ["sweep-report", str(sweep), "--significance", "--format", "csv", *FAST]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    verdicts = {row["model.family"]: row for row in rows}
    assert verdicts["rnn"]["bleu_verdict"] == "baseline"
    assert verdicts["transformer"]["bleu_verdict"] in (BETTER, WORSE, NOT_SIGNIFICANT)
    assert verdicts["transformer"]["bleu_tested_pairs"] == "2"
    compared = compare_paths([sweep], device="cpu", resamples=30, trials=100)
    expected = compared.verdicts["model.family=transformer"]["bleu"]
    assert verdicts["transformer"]["bleu_verdict"] == expected.call
    assert verdicts["transformer"]["bleu_significant_pairs"] == str(expected.significant)
    args = ["sweep-report", str(sweep), "--significance", "--format", "markdown"]
    args += ["--baseline", "model.family=transformer", *FAST]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "| bleu vs baseline | k̂/k |" in result.stdout
    assert "against model.family=transformer:" in result.stdout
    assert re.search(r"\| rnn \|.*\| (better|worse|not significant) \| \d/2 \|", result.stdout)
    for extra, message in (
        (["--significance", "--baseline", "x=1"], "matches no group. The groups: "),
        (["--baseline", "model.family=rnn"], "--baseline chooses the baseline of --significance"),
    ):
        refused = runner.invoke(app, ["sweep-report", str(sweep), *extra])
        assert refused.exit_code == 2 and message in refused.output, refused.output
