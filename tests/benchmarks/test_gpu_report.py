"""benchmarks/gpu_report.py on the files of a made-up gpu_check.sh run: an H100, a suite with a
failure and a skip, two benchmark configurations (one cut off by its time limit), the peer, and a
step skipped for lack of time. The numbers are fixture data, shaped as benchmarks/benchmark.py,
benchmarks/gpu_peer.py and pytest's JUnit XML write them; the report's own numbers (MFU, counts)
are checked against them by hand."""

import json
from pathlib import Path

import pytest
from helpers import load_script

gpu_report = load_script("benchmarks/gpu_report.py")

H100 = "NVIDIA H100 80GB HBM3"
MACHINE = {
    "kind": "machine",
    "date": "2026-12-01 10:00 UTC",
    "python": "3.12.3",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "cudnn": 91300,
    "cuda_available": True,
    "nvidia_smi": f"{H100}, 81559 MiB, 580.65.06",
    "gpu": H100,
    "gpu_memory_gib": 79.2,
    "transformers": "5.23.0",
}
SUITE_XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="5">
<testcase classname="tests.gpu.test_training_on_cuda" name="test_a[rnn-fp32]" time="1.0"/>
<testcase classname="tests.gpu.test_training_on_cuda" name="test_a[rnn-bf16]" time="1.0"/>
<testcase classname="tests.gpu.test_decoding_on_cuda" name="test_b" time="2.0"/>
<testcase classname="tests.gpu.test_resume_on_cuda" name="test_c" time="3.0">
<failure message="AssertionError: weights differ&#10;second line">trace</failure></testcase>
<testcase classname="tests.gpu.test_distributed_on_cuda" name="test_d" time="0.0">
<skipped type="pytest.skip" message="needs two CUDA devices">skip</skipped></testcase>
</testsuite></testsuites>
"""


def bench_report(gflops: float, decode: bool) -> dict:
    result = {
        "setup": "config=multi30k_transformer",
        "parameters": 7_578_624,
        "train": {
            "timed_steps": 50,
            "sec_per_step": 0.021,
            "tgt_tokens_per_sec": 81234.5,
            "src_tgt_tokens_per_sec": 165000.0,
            "model_gflops_per_sec": gflops,
            "mfu": 0.31,
            "skipped_updates": 0,
        },
        "memory_after_training": {"peak_rss_mib": 3000.0, "cuda_max_allocated_mib": 1534.2},
        "memory_at_end": {"peak_rss_mib": 3100.0, "cuda_max_allocated_mib": 402.5},
    }
    if decode:
        result["decode"] = [
            {"search": search, "batch_size": size, "sentences": 64, "sentences_per_sec": rate}
            for search, size, rate in (
                ("greedy", 64, 310.5),
                ("greedy", 1, 12.25),
                ("beam5", 64, 120.75),
                ("beam5", 1, 8.5),
            )
        ]
    return {
        "machine": {"device": "cuda"},
        "matmul_gflops": {"peak_gflops": 51000.0},
        "results": [result],
    }


PEER = {
    "peer": "HF MarianMTModel (bench/peers/hf_seq2seq.py)",
    "transformers": "5.23.0",
    "train": [
        {
            "precision": "fp32",
            "steps": 800,
            "train_seconds": 15.2,
            "tgt_tokens_per_sec": 60000.0,
            "steady_tgt_tokens_per_sec": 61000.0,
            "model_gflops_per_sec": 2676.0,
            "cuda_max_allocated_mib": 2100.0,
        },
    ],
    "generate": [
        {
            "search": "greedy",
            "batch_size": 64,
            "sentences": 64,
            "sentences_per_sec": 90.5,
            "cuda_max_allocated_mib": 500.0,
        },
        {
            "search": "beam5",
            "batch_size": 64,
            "sentences": 64,
            "sentences_per_sec": 40.25,
            "cuda_max_allocated_mib": 500.0,
        },
    ],
}


def step(name: str, label: str, status: str, artifact: str | None, **extra) -> dict:
    log = f"{name}-{label.replace(' ', '-')}.log"
    return {
        "kind": "step",
        "name": name,
        "label": label,
        "status": status,
        "exit": {"ok": 0, "failed": 1, "timeout": 124, "skipped": 0}[status],
        "seconds": 10,
        "limit": 100,
        "log": log,
        "artifact": artifact,
        **extra,
    }


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A gpu_check.sh work folder: step lines, artifacts and logs."""
    folder = tmp_path / "work"
    folder.mkdir()
    steps = [
        step("install", "install", "ok", None),
        step("suite", "gpu suite", "failed", "suite.xml"),
        step(
            "bench",
            "transformer fp32",
            "ok",
            "bench-fp32.json",
            model="transformer",
            precision="fp32",
            compile=False,
        ),
        step(
            "bench",
            "transformer bf16 compile",
            "timeout",
            "bench-compile.json",
            model="transformer",
            precision="bf16",
            compile=True,
        ),
        step(
            "bench",
            "transformer bf16",
            "ok",
            "bench-bf16.json",
            model="transformer",
            precision="bf16",
            compile=False,
        ),
        step("peer", "peer HF Marian", "ok", "peer.json"),
        step(
            "bench",
            "rnn bf16",
            "skipped",
            "bench-rnn.json",
            model="rnn",
            precision="bf16",
            compile=False,
        ),
    ]
    lines = [json.dumps(steps[0]), json.dumps(MACHINE), *map(json.dumps, steps[1:])]
    lines.append('{"kind": "step", "name": "bench", "label": "cut o')  # a line cut off
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "suite.xml").write_text(SUITE_XML)
    (folder / "bench-fp32.json").write_text(json.dumps(bench_report(20070.0, decode=True)))
    (folder / "bench-bf16.json").write_text(json.dumps(bench_report(296820.0, decode=False)))
    (folder / "bench-compile.json").write_text('{"machine": {"dev')  # killed mid-write
    (folder / "peer.json").write_text(json.dumps(PEER))
    (folder / "bench-transformer-bf16-compile.log").write_text(
        "setup config=multi30k_transformer: training\n" * 30 + "compiling graph 7\n"
    )
    return folder


def written(work: Path, tmp_path: Path, mode: str = "full") -> tuple[str, dict]:
    md, out = tmp_path / "report" / "gpu.md", tmp_path / "report" / "gpu.json"
    assert (
        gpu_report.main(["write", str(work), "--mode", mode, "--md", str(md), "--json", str(out)])
        == 0
    )
    return md.read_text(), json.loads(out.read_text())


def test_the_report_holds_machine_suite_configurations_and_failures(work, tmp_path) -> None:
    md, data = written(work, tmp_path)
    assert data["machine"]["gpu"] == H100 and data["peak"]["device"] == "H100 SXM"
    assert f"`{H100}, 81559 MiB, 580.65.06`" in md
    assert "torch 2.11.0+cu130, CUDA 13.0" in md
    assert "bf16/fp16 989.4, TF32 494.7, fp32 66.9" in md

    suite = data["suite"]
    assert (suite["passed"], suite["failed"], suite["errors"], suite["skipped"]) == (3, 1, 0, 1)
    assert "3 passed, 1 failed, 0 errors, 1 skipped (5 tests)." in md
    assert suite["failed_tests"] == [
        {
            "test": "tests.gpu.test_resume_on_cuda::test_c",
            "message": "AssertionError: weights differ",
        }
    ]
    assert "- skipped (1): needs two CUDA devices" in md

    rows = {row["configuration"]: row for row in data["configurations"]}
    fp32, bf16 = rows["transformer fp32"], rows["transformer bf16"]
    # MFU against the dense peak of the precision the configuration computes in
    assert fp32["mfu"] == pytest.approx(20070.0 / 66900.0, abs=1e-4)
    assert bf16["mfu"] == pytest.approx(296820.0 / 989400.0, abs=1e-4)
    assert "| 30.0% |" in md  # both round to 30.0 %
    assert (fp32["greedy_64"], fp32["beam5_64"], fp32["greedy_1"]) == (310.5, 120.75, 12.25)
    assert fp32["train_peak_mib"] == 1534.2 and fp32["decode_peak_mib"] == 402.5
    assert bf16["greedy_64"] is None and bf16["decode_peak_mib"] is None  # no decoding run
    assert fp32["model_tflops_per_sec"] == 20.07

    compiled = rows["transformer bf16 compile"]  # timed out, its JSON cut off: no figures
    assert compiled["status"] == "timeout" and compiled["tgt_tokens_per_sec"] is None
    assert rows["rnn bf16"]["status"] == "skipped"
    peer = rows["peer transformer fp32"]
    assert peer["tgt_tokens_per_sec"] == 61000.0  # after its first 10 steps
    assert peer["mfu"] == pytest.approx(2676.0 / 66900.0, abs=1e-4)
    assert (peer["greedy_64"], peer["beam5_64"], peer["decode_sentences"]) == (90.5, 40.25, 64)
    assert "| HF Marian (peer) | peer transformer fp32 | ok | 61,000 |" in md
    assert "| attnseq | transformer fp32 | ok | 81,234 | 20.07 | 30.0% | 1,534 | 310.5 |" in md

    # failed and timed-out steps show the end of their logs; the cut-off line is left out
    assert [problem["step"] for problem in data["problems"]] == [
        "gpu suite",
        "transformer bf16 compile",
    ]
    assert "compiling graph 7" in md and "(no log)" in md  # the suite's log is missing
    assert len(data["steps"]) == 7
    assert "| transformer bf16 compile | timeout | 10 | 100 |" in md


def test_an_unknown_gpu_gets_no_mfu_and_says_so(work, tmp_path) -> None:
    lines = (work / "results.jsonl").read_text().replace(H100, "NVIDIA H100 NVL")
    (work / "results.jsonl").write_text(lines)
    md, data = written(work, tmp_path, mode="quick")
    assert data["peak"] is None
    assert all(row.get("mfu") is None for row in data["configurations"])
    assert "MFU left out: this GPU is not in" in md
    assert "`benchmarks/gpu_check.sh --quick`" in md


def test_a_run_that_left_nothing_still_gets_a_report(tmp_path) -> None:
    empty = tmp_path / "work"
    empty.mkdir()
    md, data = written(empty, tmp_path)
    assert data["suite"] is None and data["configurations"] == [] and data["steps"] == []
    assert "No result: the suite did not run to its end" in md


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_peak_table_keys(name: str, key: str | None) -> None:
    assert gpu_report.peak_key(name) == key
