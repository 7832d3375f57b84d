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


def unreadable_corpus(folder: Path) -> list[str]:
    """Overrides of a local corpus whose training file is not UTF-8 text: the files exist (the
    start checks pass), the data preparation refuses them."""
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.tsv").write_text("a b\tc d\ne f\tg h\n", encoding="utf-8")
    (folder / "train.tsv").write_bytes(b"a b\tc d\n\xff\xfe broken\tx\n")
    return [
        "data.source=local", "data.format=tsv", f"data.root={folder}", "data.name=toy",
        "data.tokenizer=word",
        *(f"+data.splits.{split}={split}.tsv" for split in ("train", "valid", "test")),
    ]  # fmt: skip


@pytest.mark.usefixtures("one_intra_op_thread")
def test_a_refused_start_leaves_no_run_directory_and_the_callers_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNSEQ_CACHE", str(tmp_path / "cache"))
    corpus = unreadable_corpus(tmp_path / "corpus")
    threads = [override for override in STEPS if not override.startswith("trainer.threads")]
    with pytest.raises(attnseq.UserError):
        attnseq.train([*threads, *corpus, "trainer.threads=2"])
    assert not (tmp_path / "outputs").exists()  # neither outputs/DATE/TIME nor outputs/DATE
    assert torch.get_num_threads() == 1  # training's 2 threads were the call's, not ours
    with pytest.raises(attnseq.UserError):
        attnseq.train([*STEPS, *corpus], run_dir=tmp_path / "runs" / "new")
    assert not (tmp_path / "runs").exists()
    kept = tmp_path / "mine"
    kept.mkdir()
    with pytest.raises(attnseq.UserError):
        attnseq.train([*STEPS, *corpus], run_dir=kept)
    assert kept.is_dir()  # the caller's own folder stays


def test_run_dir_and_a_hydra_run_dir_override_are_refused_together(tmp_path: Path) -> None:
    with pytest.raises(attnseq.UserError, match="both name the run directory"):
        attnseq.train([*STEPS, f"hydra.run.dir={tmp_path / 'b'}"], run_dir=tmp_path / "a")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("overrides", "run_dir", "message"),
    [
        ([None], None, r"overrides\[0\] must be a str, not NoneType"),
        ("trainer.max_steps=2", None, "overrides must be a list of str"),
        (5, None, "overrides must be a list of str"),
        ([], 5, r"run_dir must be a str or path \(os.PathLike\) or None, not int"),
    ],
)
def test_wrong_types_are_type_errors_naming_the_argument(
    overrides: object, run_dir: object, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        attnseq.train(overrides, run_dir=run_dir)  # type: ignore[arg-type]


def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(attnseq.UserError, match="cannot write into /proc"):
        attnseq.train(STEPS, run_dir="/proc/run")
    from helpers import attnseq_in_process

    result = attnseq_in_process("train", *STEPS, "hydra.run.dir=/proc/run", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "hydra.run.dir /proc/run: cannot write into /proc" in result.stderr


def test_a_damaged_mlflow_store_is_refused_before_the_run_directory(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"not a database, but 64 bytes of something else entirely......")
    tracking = ["logger=[tensorboard,mlflow]", f"tracker.mlflow_tracking_uri=sqlite:///{store}"]
    with pytest.raises(attnseq.UserError, match="is not a readable SQLite database"):
        attnseq.train([*STEPS, *tracking], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
