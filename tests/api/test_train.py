"""`attnseq.train`: one training from Python, composed as `attnseq train` composes it; what
the caller sees (bar, log lines), and the process settings it gives back."""

import importlib.util
import io
import json
import logging
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import TINY

import attnseq
from attnseq.config.conversion import config_to_dict

STEPS = [*TINY, "trainer.max_steps=2", "trainer.validate_every=2", "trainer.progress=false"]
# Two updates with a training line each, the bar left to the call's `progress`
LOGGED = [*STEPS[:-1], "trainer.log_every=1"]


@pytest.mark.slow
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
    assert saved.config.seed == 3 and saved.config.model.decoder.value == "luong"
    recorded = (result.run_dir / ".hydra" / "config.yaml").read_text()
    assert "decoder: luong" in recorded


@pytest.mark.slow
def test_the_same_overrides_compose_the_same_config_as_the_command(tmp_path: Path) -> None:
    from helpers import check_train_args

    result = attnseq.train(overrides=STEPS, run_dir=tmp_path / "run")
    assert result.run_dir == (tmp_path / "run").absolute()
    composed = check_train_args(list(STEPS))  # what `attnseq train STEPS` composes
    saved = attnseq.load(result.checkpoint, "cpu", threads=1).config
    assert config_to_dict(saved) == config_to_dict(composed)
    with pytest.raises(attnseq.UserError, match="holds") as refused:
        attnseq.train(overrides=STEPS, run_dir=tmp_path / "run")  # a finished run is kept
    assert "another run_dir=DIR" in str(refused.value)  # the argument, not Hydra's override
    assert "hydra" not in str(refused.value)


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
        "data.source=local",
        "data.format=tsv",
        f"data.root={folder}",
        "data.name=toy",
        "data.tokenizer=word",
        *(f"+data.splits.{split}={split}.tsv" for split in ("train", "valid", "test")),
    ]


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_run_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(attnseq.UserError, match="cannot write into /proc"):
        attnseq.train(STEPS, run_dir="/proc/run")
    from helpers import attnseq_in_process

    result = attnseq_in_process("train", *STEPS, "hydra.run.dir=/proc/run", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "hydra.run.dir /proc/run: cannot write into /proc" in result.stderr


@pytest.mark.slow
def test_a_damaged_mlflow_store_is_refused_before_the_run_directory(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"not a database, but 64 bytes of something else entirely......")
    tracking = ["logger=[tensorboard,mlflow]", f"tracker.mlflow_tracking_uri=sqlite:///{store}"]
    with pytest.raises(attnseq.UserError, match="is not a readable SQLite database"):
        attnseq.train([*STEPS, *tracking], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"progress": "yes"}, "progress must be True or False, not str"),
        ({"verbose": None}, "verbose must be True or False, not NoneType"),
        ({"callbacks": [object()]}, r"callbacks\[0\] \(object\) has none of the methods"),
        ({"callbacks": attnseq.Callback()}, "callbacks must be a list of callbacks"),
    ],
)
def test_wrong_keyword_types_are_type_errors(keywords: dict, message: str, tmp_path: Path):
    with pytest.raises(TypeError, match=message):
        attnseq.train(STEPS, run_dir=tmp_path / "run", **keywords)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------ what the caller sees
BAR = "%|"  # tqdm's text bar ("train: 100%|█████| 2/2 ..."): stderr is no terminal here
TRAINING_LINE = "step 1/2  epoch"  # the periodic line, which the bar shows instead


@pytest.mark.slow
def test_progress_draws_the_bar_with_the_validation_lines_above_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = attnseq.train(LOGGED, run_dir=tmp_path / "run", progress=True)
    out, err = capfd.readouterr()
    assert BAR in err and "2/2" in err and "loss" in err
    assert "][attnseq][INFO] - step 2: valid/" in err
    assert TRAINING_LINE not in err
    assert TRAINING_LINE in (result.run_dir / "train.log").read_text()
    assert "test metrics of the best checkpoint" in out


@pytest.mark.slow
def test_by_default_the_bar_shows_in_a_notebook_and_not_in_a_script(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    attnseq.train(LOGGED, run_dir=tmp_path / "script")
    out, err = capfd.readouterr()
    assert BAR not in err and TRAINING_LINE in err and "step 2: valid/" in err
    assert "test metrics of the best checkpoint" in out
    monkeypatch.setattr("attnseq.api.train.in_notebook", lambda: True)
    attnseq.train(LOGGED, run_dir=tmp_path / "notebook")
    _, err = capfd.readouterr()
    assert BAR in err and TRAINING_LINE not in err


@pytest.mark.slow
def test_verbose_false_is_silent_and_train_log_has_it_all(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = attnseq.train(LOGGED, run_dir=tmp_path / "run", verbose=False)
    assert capfd.readouterr() == ("", "")
    log = (result.run_dir / "train.log").read_text()
    assert TRAINING_LINE in log and "step 2: valid/" in log


@pytest.mark.slow
def test_the_callers_own_logging_shows_each_line_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    shown = io.StringIO()
    handler = logging.StreamHandler(shown)  # as logging.basicConfig(stream=...) installs
    logging.getLogger().addHandler(handler)
    try:
        attnseq.train(LOGGED, run_dir=tmp_path / "run", progress=False)
    finally:
        logging.getLogger().removeHandler(handler)
    assert shown.getvalue().count("step 2: valid/") == 1
    assert "step 2: valid/" not in capfd.readouterr().err


@pytest.mark.slow
def test_train_load_and_translate_leave_the_process_settings_as_they_were(
    tmp_path: Path,
) -> None:
    import torch

    threads = torch.get_num_threads()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.set_num_threads(2)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.manual_seed(123)
        random.seed(123)
        run = attnseq.train([*STEPS, "trainer.threads=1", "trainer.tf32=true", "seed=7"], tmp_path)
        assert torch.get_num_threads() == 2
        assert torch.backends.cuda.matmul.allow_tf32 is False
        drawn = (torch.rand(3), random.random())
        torch.manual_seed(123)
        random.seed(123)
        assert torch.equal(drawn[0], torch.rand(3)) and drawn[1] == random.random()
        for model in (
            attnseq.load(run.checkpoint, "cpu"),
            attnseq.load(run.run_dir, "cpu", threads=1),
        ):
            model.translate("June 5, 2001", beam=2)
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = tf32


# A Jupyter kernel as tqdm.auto and attnseq tell one (IPython's shell is the kernel's), in a
# process without ipywidgets: where tqdm.auto warns "IProgress not found" when first imported.
FAKE_KERNEL = """
import sys, types, warnings
shell_module = types.ModuleType("ipykernel.zmqshell")
shell_module.ZMQInteractiveShell = type("ZMQInteractiveShell", (), {})
sys.modules["ipykernel.zmqshell"] = shell_module
import IPython
shell = shell_module.ZMQInteractiveShell()
IPython.get_ipython = lambda: shell
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    {imports}
print([str(warning.message)[:19] for warning in caught])
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("imports", "warned"),
    [
        ("import tqdm.auto", ["IProgress not found"]),  # what a notebook shows without attnseq
        # the API's modules, and the libraries of training (datasets) and of explain (captum)
        ("import attnseq.api.model, attnseq.api.train, datasets, captum.attr", []),
    ],
)
def test_no_iprogress_warning_in_a_notebook_without_ipywidgets(imports: str, warned) -> None:
    pytest.importorskip("captum")
    if importlib.util.find_spec("ipywidgets") is not None:
        pytest.skip("ipywidgets is installed: tqdm.auto draws widgets and never warns")
    code = textwrap.dedent(FAKE_KERNEL).replace("{imports}", imports)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(warned)
