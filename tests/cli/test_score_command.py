"""`attnseq score` (attnseq/cli/score_command.py): per-pair teacher-forced log-probabilities that
add up to eval's test loss, streamed in chunks, an --out file and a summary, and user mistakes
ended with one message and exit status 2."""

import math
from pathlib import Path

import pytest
from helpers import tiny_config, untrained_checkpoint
from typer.testing import CliRunner

from attnseq.cli.app import app
from attnseq.data.prepare import prepare_data
from attnseq.data.tokenizers import TokenizerPair
from attnseq.evaluation.checkpoint_eval import evaluate_checkpoint
from attnseq.io.checkpoint import load_checkpoint

runner = CliRunner()
KINDS = {
    "rnn": (),
    "transformer": ("model.family=transformer",),
    "rnn_copy": ("model.copy=true",),
    "transformer_copy": ("model.family=transformer", "model.copy=true"),
}
# eval decodes too; its test loss does not depend on the output limit, its run time does
SHORT_OUTPUTS = ["decoding.max_output_ratio=0.0", "decoding.max_output_extra=1"]


def write_pairs(folder: Path, pairs: list[tuple[str, str]]) -> tuple[Path, Path]:
    src, tgt = folder / "in.src", folder / "in.tgt"
    src.write_text("".join(s + "\n" for s, _ in pairs))
    tgt.write_text("".join(t + "\n" for _, t in pairs))
    return src, tgt


def score_cli(*args: str):
    return runner.invoke(app, ["score", *args, "--device", "cpu"])


def parse(output: str) -> list[tuple[float, float, int]]:
    rows = [line.split("\t") for line in output.splitlines()]
    return [(float(total), float(mean), int(tokens)) for total, mean, tokens in rows]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_score_adds_up_to_evals_test_loss(kind: str, tmp_path: Path) -> None:
    """sum of -log P / tokens over the test split == `attnseq eval`'s test/loss."""
    overrides = KINDS[kind]
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", *overrides)
    cfg = tiny_config(*overrides)
    tokenizers = TokenizerPair.from_state(load_checkpoint(checkpoint)["tokenizers"])
    pairs = prepare_data(cfg.data, cfg.seed, tokenizers=tokenizers, splits=["test"]).pairs["test"]
    src, tgt = write_pairs(tmp_path, pairs)
    result = score_cli(str(checkpoint), "--src", str(src), "--tgt", str(tgt))
    assert result.exit_code == 0, result.output
    rows = parse(result.stdout)
    assert len(rows) == len(pairs) == 20
    for total, mean, tokens in rows:
        assert total < 0 and tokens >= 2 and mean == pytest.approx(total / tokens, abs=1e-5)
    nll = -sum(total for total, _, _ in rows) / sum(tokens for _, _, tokens in rows)
    metrics = evaluate_checkpoint(
        checkpoint, "test", out_dir=tmp_path / "eval", device_name="cpu", overrides=SHORT_OUTPUTS
    )
    assert nll == pytest.approx(metrics["test/loss"], rel=1e-5)
    assert "scored 20 of 20 pairs; 220 tokens" in result.stderr
    assert f"mean NLL {nll:.4f} nats per token" in result.stderr


def test_out_file_and_summary(rnn_checkpoint: Path, tmp_path: Path) -> None:
    src, tgt = write_pairs(tmp_path, [("May 5, 2001", "2001-05-05"), ("", "")])
    out = tmp_path / "scores.tsv"
    result = score_cli(str(rnn_checkpoint), "--src", str(src), "--tgt", str(tgt), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    lines = out.read_text().splitlines()
    assert lines[1] == "nan\tnan\t0" and lines[0].endswith("\t11")
    total = float(lines[0].split("\t")[0])
    assert f"mean NLL {-total / 11:.4f} nats per token" in result.stderr
    assert "scored 1 of 2 pairs, 1 with an empty source not scored" in result.stderr
    assert f"perplexity {math.exp(-total / 11):.4f}" in result.stderr


@pytest.mark.parametrize(
    ("src_lines", "tgt_lines", "message"),
    [
        (None, "a\n", "--src file not found"),
        ("a\nb\n", "a\n", "--src has 2 lines but --tgt has 1"),
        ("", "", "is empty"),
    ],
)
def test_user_mistakes_exit_2(
    src_lines: str | None, tgt_lines: str, message: str, tmp_path: Path
) -> None:
    src, tgt = tmp_path / "in.src", tmp_path / "in.tgt"
    if src_lines is not None:
        src.write_text(src_lines)
    tgt.write_text(tgt_lines)
    result = score_cli(str(tmp_path / "no.pt"), "--src", str(src), "--tgt", str(tgt))
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.slow
def test_streamed_in_chunks_with_errors_naming_the_global_line(
    rnn_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of two pairs: the same lines as one chunk; a bad line in a later chunk is named
    by its line in the file, and --out keeps the earlier file."""
    import attnseq.evaluation.scoring as scoring

    pairs = [("May 5, 2001", "2001-05-05"), ("", ""), ("2 Jan 1990", "1990"), ("June 1", "0601")]
    src, tgt = write_pairs(tmp_path, pairs)
    args = [str(rnn_checkpoint), "--src", str(src), "--tgt", str(tgt)]
    whole = score_cli(*args)
    monkeypatch.setattr(scoring, "STREAM_CHUNK", 2)
    chunked = score_cli(*args)
    assert whole.exit_code == chunked.exit_code == 0, chunked.output
    assert chunked.stdout.splitlines()[1] == "nan\tnan\t0"
    assert [line.split("\t")[2] for line in chunked.stdout.splitlines()] == [
        line.split("\t")[2] for line in whole.stdout.splitlines()
    ]
    out = tmp_path / "scores.tsv"
    out.write_text("old\n")
    tgt.write_bytes(tgt.read_bytes().replace(b"0601", b"\xff601"))
    result = score_cli(*args, "--out", str(out))
    assert result.exit_code == 2 and "line 4 is not UTF-8" in result.stderr
    assert out.read_text() == "old\n"
