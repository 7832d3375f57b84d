"""`attnseq.compare`, `attnseq compare` from Python: the result object of two runs, the
threads its decoding uses, the training targets, gold links and attention=False, and the
arguments it refuses before anything decodes."""

import re
from pathlib import Path

import pytest
from helpers import compared_runs, decoding_threads, no_decoding

import attnseq
from attnseq.errors import UserError


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return compared_runs(tmp_path_factory)


@pytest.mark.slow
def test_python_api(runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = runs
    result = attnseq.compare([a, b], seed=3, resamples=100, trials=200, device="cpu")
    assert isinstance(result, attnseq.Comparison)
    assert repr(result).startswith(f"<Comparison of 2 systems on 20 sentences, bleu: {a}: ")
    assert "\n" not in repr(result)
    assert result.scores[str(b)]["bleu"].p_bootstrap is not None
    assert result.save_figure(tmp_path / "f.png").is_file()
    assert result.attention[str(b)].entropy > 0 and result.words is not None
    with pytest.raises(TypeError, match="systems must be a list of paths"):
        attnseq.compare(str(a))
    with pytest.raises(TypeError, match="threads"):
        attnseq.compare([a, b], threads=1.5)


def test_threads_are_set_for_the_decoding_and_given_back(
    runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    a, b = runs
    seen = decoding_threads(monkeypatch)
    before = torch.get_num_threads()
    attnseq.compare([a, b], resamples=20, trials=20, device="cpu", attention=False, threads=1)
    assert seen == [1, 1] and torch.get_num_threads() == before


@pytest.mark.slow
def test_python_api_training_targets_gold_and_no_attention(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = runs
    fast = {"resamples": 50, "trials": 100, "device": "cpu"}
    given = attnseq.compare([a, b], train_references=["1990-11-07 x"], attention=False, **fast)
    assert given.words is not None and given.words.frequencies_from == "the given training targets"
    assert given.attention == {} and given.to_dict()["attention"] is None
    gold = tmp_path / "gold.txt"
    with pytest.raises(UserError, match=f"^gold file not found: {re.escape(str(gold))}$"):
        attnseq.compare([a, b], gold=gold, **fast)
    gold.write_text("0-0\n")
    with pytest.raises(UserError, match="^gold scores the attention that attention=False leaves"):
        attnseq.compare([a, b], gold=gold, attention=False, **fast)
    with pytest.raises(UserError, match="^gold .*: 1 lines of Pharaoh links for 20 sentences$"):
        attnseq.compare([a, b], gold=gold, **fast)
    with pytest.raises(UserError, match="^train_references holds no words"):
        attnseq.compare([a, b], train_references=[""], **fast)


def test_test_sizes_are_refused_before_any_checkpoint_decodes(
    runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    no_decoding(monkeypatch)
    a, b = (str(run) for run in runs)
    with pytest.raises(UserError, match="resamples must be >= 1"):
        attnseq.compare([a, b], resamples=0)
    with pytest.raises(TypeError, match="seed must be an int, got str"):
        attnseq.compare([a, b], seed="1")
