"""benchmarks/benchmark.py runs end to end on a tiny setup and a checkpoint (its figures are
measured on a quiet machine, never asserted here: speed is not a test's business)."""

import json
import subprocess

import pytest
import torch
from helpers import load_script, run_script, untrained_checkpoint

pytestmark = pytest.mark.slow  # trainings and decodes of the benchmark


SCRIPT = "benchmarks/benchmark.py"
TINY = "data.train_size=300 data.test_size=6 model.emb_dim=16 model.hidden=32 model.enc_hidden=16"


def _run(*arguments: str) -> subprocess.CompletedProcess:
    return run_script(SCRIPT, "--threads", "1", *arguments)


def test_benchmark_reports_training_decoding_and_a_checkpoints_bleu(tmp_path):
    checkpoint = untrained_checkpoint(tmp_path / "model.pt", "data.test_size=6")
    result = _run(
        "--steps",
        "2",
        "--warmup",
        "0",
        "--decode-sentences",
        "3",
        TINY,
        "--checkpoint",
        str(checkpoint),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["matmul_gflops"]["peak_gflops"] > 0
    trained, loaded = report["results"]
    assert trained["train"]["tgt_tokens_per_sec"] > 0
    assert 0 < trained["train"]["mfu"] < 1
    assert {(row["search"], row["batch_size"]) for row in trained["decode"]} == {
        ("greedy", 64),
        ("greedy", 1),
        ("beam5", 64),
        ("beam5", 1),
    }
    assert "bleu" not in trained["decode"][0]  # a few updates: speed only
    assert loaded["checkpoint"] == str(checkpoint)
    for row in loaded["decode"]:
        assert row["sentences"] == 3
        assert 0 <= row["bleu"] <= 100 and row["bleu_signature"].startswith("nrefs:1")


def test_benchmark_without_decoding_and_with_a_missing_checkpoint(tmp_path):
    result = _run("--steps", "1", "--warmup", "0", "--decode-sentences", "0", TINY)
    assert result.returncode == 0, result.stderr
    assert "decode" not in json.loads(result.stdout)["results"][0]

    missing = _run("--checkpoint", str(tmp_path / "nope.pt"))
    assert missing.returncode == 2
    assert "no such file" in missing.stderr


@pytest.mark.parametrize(
    ("device", "message"),
    [("gpu", "--device='gpu' is not a device"), ("cpu:1", "is not a device")],
)
def test_benchmark_device_is_a_torch_device_string(device, message, capsys):
    """--device takes torch's spellings (cpu, cuda, cuda:N, mps, auto), checked against this
    machine before anything is measured: one line and exit status 2 otherwise."""
    benchmark = load_script("benchmarks/benchmark.py")
    assert benchmark.main(["--device", device]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "cuda:N" in err[0], err
    assert benchmark._device("cpu").type == "cpu"
    if not torch.cuda.is_available():  # a CUDA device the machine lacks is refused, not the CPU
        assert benchmark.main(["--device", "cuda:0"]) == 2
        assert "this machine has cpu" in capsys.readouterr().err
