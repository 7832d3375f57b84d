"""`attnseq train` (attnseq/cli/train_command.py) in this process: typos and bad values exit 2 in
one line before anything is written, `--cfg job` prints the composed config, `--hydra-help`
is Hydra's help whatever the overrides."""

from pathlib import Path

import pytest
import yaml
from helpers import attnseq_in_process


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("model.hiden=3", "Did you mean 'model.hidden'"),
        # a decoding setting where older configs had it: refused, its new key named
        ("trainer.beam=4", "unknown config key 'trainer.beam'. Did you mean 'decoding.beam'?"),
        ("trainer.min_output_length=4", "Did you mean 'decoding.min_length'?"),
        ("data=nope", "unknown choice data=nope"),
        ("model.rnn.cell=foo", "expected one of"),
        ("model.d_model=30", None),
        # an interpolation of the wrong type: OmegaConf's message with its values filled in
        ("decoding.beam=${oc.env:HOME}", "Value '" + str(Path.home())),
    ],
)
def test_train_typos_exit_2_without_traceback(
    argument: str, message: str | None, tmp_path: Path
) -> None:
    extra = ["model=transformer"] if argument.startswith("model.d_model") else []
    result = attnseq_in_process("train", argument, *extra, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:")
    if message:
        assert message in result.stderr
    assert "$VALUE" not in result.stderr
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_attention_kind_errors_exit_2(tmp_path: Path) -> None:
    result = attnseq_in_process(
        "train",
        "model=transformer",
        "model.attention.kind=linformer",
        "model.attention.decoder_self=true",
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "model.attention.kind=linformer cannot be causal" in result.stderr
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_shared_embeddings_over_vocabularies_of_two_sizes_exit_2(tmp_path: Path) -> None:
    """The vocabularies come from the data: the refusal comes once they are built, one line,
    before any update, and the run directory the start made is gone."""
    result = attnseq_in_process(
        "train",
        "data.train_size=50",
        "data.valid_size=5",
        "data.test_size=5",
        "model.share_src_tgt_embeddings=true",
        "trainer.max_steps=1",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        env={"ATTNSEQ_CACHE": str(tmp_path / "cache")},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("error: model.share_src_tgt_embeddings=true needs equal")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_cfg_job_prints_the_composed_config(tmp_path: Path) -> None:
    result = attnseq_in_process(
        "train", "--cfg", "job", "model=rnn_luong", "decoding.beam=4", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "decoder: luong" in result.stdout
    config = yaml.safe_load(result.stdout)
    assert config["decoding"]["beam"] == 4 and config["decoding"]["min_length"] == 0
    assert "beam" not in config["trainer"]


@pytest.mark.slow
def test_hydra_help_with_overrides_prints_hydra_help(tmp_path: Path) -> None:
    """Hydra composes only its own config for --hydra-help: the overrides of a run would be
    unknown keys there ("unknown config key 'trainer'. Did you mean 'trainer'?")."""
    args = ["train", "--hydra-help", "trainer.max_steps=1", "model=transformer"]
    result = attnseq_in_process(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Hydra (") and "--hydra-help" in result.stdout
    assert not (tmp_path / "outputs").exists()
