"""`attnseq.train`: one training from Python, composed as `attnseq train` composes it."""

import json
from pathlib import Path

import pytest
from helpers import TINY

import attnseq
from attnseq.config.conversion import config_to_dict

STEPS = [*TINY, "trainer.max_steps=2", "trainer.validate_every=2", "trainer.progress=false"]


def test_a_training_returns_its_run_directory_and_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = attnseq.train(overrides=[*STEPS, "model=rnn_luong", "seed=3"])
    assert result.run_dir.parent.parent == Path("outputs")  # outputs/DATE/TIME, as the CLI
    assert result.checkpoint.is_file()
    assert result.metrics == json.loads((result.run_dir / "metrics.json").read_text())
    assert "test/exact_match" in result.metrics
    log = (result.run_dir / "train.log").read_text()
    assert "][attnseq][INFO] - " in log and "step 2" in log
    saved = attnseq.load(result.checkpoint, "cpu", threads=1)
    assert saved.cfg.seed == 3 and saved.cfg.model.decoder.value == "luong"
    recorded = (result.run_dir / ".hydra" / "config.yaml").read_text()
    assert "decoder: luong" in recorded


def test_the_same_overrides_compose_the_same_config_as_the_command(tmp_path: Path) -> None:
    from helpers import check_train_args

    result = attnseq.train(overrides=STEPS, run_dir=tmp_path / "run")
    assert result.run_dir == (tmp_path / "run").absolute()
    composed = check_train_args(list(STEPS))  # what `attnseq train STEPS` composes
    saved = attnseq.load(result.checkpoint, "cpu", threads=1).cfg
    assert config_to_dict(saved) == config_to_dict(composed)
    with pytest.raises(attnseq.UserError, match="holds"):
        attnseq.train(overrides=STEPS, run_dir=tmp_path / "run")  # a finished run is kept


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["seed=1,2"], "trains one model, but seed=1,2 sweeps"),
        (["trainer.max_step=3"], "Did you mean 'trainer.max_steps'"),
        (["config=no_such_experiment"], "no_such_experiment"),
    ],
)
def test_mistakes_raise_user_errors_before_any_folder(
    overrides: list[str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(attnseq.UserError, match=message):
        attnseq.train(overrides=[*TINY, *overrides], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
