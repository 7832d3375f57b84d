"""studies/compare_attention_kinds.py trains one run per attention kind and tabulates them; here on
the generated reverse task with a tiny transformer (the DialogSum figures are in the README)."""

import json
import subprocess

import pytest
from helpers import TINY_TRANSFORMER, run_script

pytestmark = pytest.mark.slow  # one training per attention kind


SCRIPT = "studies/compare_attention_kinds.py"
TINY = [*TINY_TRANSFORMER, "data.train_size=40", "trainer.max_steps=2"]


def _run(*arguments: str) -> subprocess.CompletedProcess:
    return run_script(SCRIPT, "--config", "reverse_transformer", *arguments)


def test_one_run_per_kind_and_a_table(tmp_path):
    out = tmp_path / "kinds"
    result = _run("--kinds", "full,local", "--out", str(out), "--", *TINY)
    assert result.returncode == 0, result.stderr
    rows = json.loads((out / "summary.json").read_text())
    assert list(rows) == ["full", "local"]
    for row in rows.values():
        assert row["steps"] == 2 and row["epochs"] > 0 and row["seconds_per_epoch"] > 0
        # from the train/loss scalars of updates 1 and 2, before the validation at update 2
        assert 0 < row["training_seconds_per_epoch"] < 10 * row["seconds_per_epoch"]
        assert row["test/rouge_l"] is None  # a translation task has no ROUGE
    assert rows["full"]["parameters"] == rows["local"]["parameters"]
    assert "| local |" in (out / "summary.md").read_text()
    # a second call reuses the finished runs instead of training again
    again = _run("--kinds", "full,local", "--out", str(out), "--", *TINY)
    assert again.returncode == 0 and "training:" not in again.stderr
    assert json.loads((out / "summary.json").read_text()) == rows


def test_a_failed_kind_is_a_row_not_a_crash(tmp_path):
    # proj_dim 0 is a config error (exit status 2): that kind's row says so, the others go on
    bad = [*TINY, "model.attention.proj_dim=0"]
    result = _run("--kinds", "linformer", "--out", str(tmp_path), "--", *bad)
    assert result.returncode == 0, result.stderr
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert rows == {"linformer": {"error": "attnseq train exited with 2"}}


def test_user_overrides_replace_the_kind_defaults(tmp_path):
    result = _run(
        "--kinds",
        "local",
        "--decoder-self",
        "--dry-run",
        "--out",
        str(tmp_path),
        "--",
        "model.attention.D=4",
    )
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.strip().splitlines()
    assert "model.attention.D=4" in line and "model.attention.D=32" not in line
    assert "model.attention.decoder_self=true" in line
    assert not (tmp_path / "local").exists()


def test_every_config_kind_is_compared_with_its_defaults(tmp_path):
    """The kinds come from AttentionKind; bigbird's block parameters are its defaults, and it is
    causal, so --decoder-self puts it in the decoder too."""
    result = _run("--decoder-self", "--dry-run", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    kinds = [line.split("model.attention.kind=")[1].split()[0] for line in lines]
    assert kinds == [
        "full",
        "local",
        "strided",
        "longformer",
        "linformer",
        "linear",
        "performer",
        "bigbird",
    ]
    bigbird = lines[-1]
    for key in ("block_size=16", "global_blocks=2", "random_blocks=3", "decoder_self=true"):
        assert f"model.attention.{key}" in bigbird
