"""The pointer-generator transformer (model.copy=true) with every self-attention kind: train two
steps through the composition root, decode the test split with `attnseq eval`, and draw a forced
alignment with `attnseq visualize-alignment --tgt`. Kinds that return no attention weights
(linear, performer) must not break the figures; kinds that cannot be causal must be refused for
decoder self-attention with exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny_config
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.config.choices import AttentionKind
from attnseq.training.run import run_training

runner = CliRunner()

CAUSAL = ["full", "local", "strided", "linear", "performer", "bigbird"]
ENCODER_ONLY = ["longformer", "linformer"]


def test_matrix_covers_every_kind() -> None:
    assert sorted(CAUSAL + ENCODER_ONLY) == sorted(kind.value for kind in AttentionKind)


def matrix_overrides(kind: str, decoder_self: bool) -> list[str]:
    return [
        "model.family=transformer",
        "model.copy=true",
        f"model.attention.kind={kind}",
        f"model.attention.decoder_self={str(decoder_self).lower()}",
        "model.dropout=0.0",
        "data.train_size=60",
        "data.valid_size=6",
        "data.test_size=6",
        "trainer.max_steps=2",
        "trainer.validate_every=2",
        "trainer.num_heatmaps=1",
        "trainer.threads=1",
        "optim.warmup_steps=1",
    ]


CASES = [(kind, False) for kind in CAUSAL + ENCODER_ONLY] + [
    pytest.param(kind, True, marks=() if kind in ("full", "linear") else pytest.mark.slow)
    for kind in CAUSAL
]


@pytest.mark.parametrize(("kind", "decoder_self"), CASES)
def test_copy_transformer_trains_decodes_and_draws(
    kind: str, decoder_self: bool, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    metrics = run_training(tiny_config(*matrix_overrides(kind, decoder_self)), run_dir)
    assert "test/loss" in metrics
    checkpoint = run_dir / "checkpoints" / "best.pt"
    assert checkpoint.is_file()

    result = runner.invoke(
        app, ["eval", str(checkpoint), "--out", str(tmp_path / "eval"), "--beam", "1"]
    )
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "eval").rglob("metrics.json"))

    out = tmp_path / "alignment.png"
    result = runner.invoke(
        app,
        [
            "visualize-alignment",
            str(checkpoint),
            "--src",
            "a b c d",
            "--tgt",
            "d c b a",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and out.stat().st_size > 0


@pytest.mark.parametrize("kind", ENCODER_ONLY)
def test_non_causal_kind_in_decoder_self_attention_exits_2(kind: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnseq",
            "train",
            *matrix_overrides(kind, True),
            "trainer.device=cpu",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:")
    assert f"model.attention.kind={kind} cannot be causal" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
