"""The report of benchmarks/gpu_check.sh: docs/results/gpu.md and docs/results/gpu.json, written
from the JSON lines its steps left in its work folder (and the files those lines name).

    python3 benchmarks/gpu_report.py machine            # one JSON line: the GPU, torch, CUDA
    python3 benchmarks/gpu_report.py write WORK --mode full --md docs/results/gpu.md \\
        --json docs/results/gpu.json

WORK/results.jsonl holds one object per line: `{"kind": "machine", ...}` (this script's
`machine`) and one `{"kind": "step", ...}` per step of the check: name (install, suite, bench,
peer), label, status (ok, failed, timeout, skipped), exit, seconds, limit, log, artifact (a file
in WORK or null) and, for a benchmark, the configuration (model, precision, compile). The
artifacts: suite.xml (pytest's JUnit XML), bench-*.json (benchmarks/benchmark.py's report),
peer.json (benchmarks/gpu_peer.py's). A step that failed or timed out is reported as such, with
the end of its log, and whatever its artifact holds is still used; the report is written
whatever failed.

MFU is model FLOP/s (benchmarks/benchmark.py's split estimate: 6 x encoder weights per source
token + 6 x decoder weights, output projection included, per target token) over the GPU's dense
peak for the precision the configuration computes in: tensor-core bf16/fp16, TF32 where
`trainer.tf32=true`, and the CUDA cores' fp32 otherwise. Peaks from NVIDIA's documents (`PEAKS`);
for a GPU not in the table MFU is left out, and the report says so.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from attnseq.io.atomic import atomic_write_json, atomic_write_text  # noqa: E402

# Dense peak TFLOP/s per precision (the datasheets' tensor-core figures with sparsity halved).
H100_SXM = {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}
PEAKS: dict[str, dict[str, Any]] = {
    "H100 SXM": {
        "tflops": H100_SXM,
        "source": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), table 3, H100 SXM5",
    },
    "H100 PCIe": {
        "tflops": {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2},
        "source": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), table 3, H100 PCIe",
    },
    "H200": {
        "tflops": H100_SXM,
        "source": "NVIDIA H200 Tensor Core GPU datasheet (2024): the H100 SXM's GH100 compute "
        "(FP32 67, TF32 989 and BF16 1,979 TFLOP/s with sparsity) with more, faster memory",
    },
    "A100": {
        "tflops": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
        "source": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), table 1",
    },
}


def peak_key(device_name: str) -> str | None:
    """The PEAKS entry of a CUDA device name (`NVIDIA H100 80GB HBM3` is the SXM part), or
    None for a GPU the table does not know (an H100 NVL among them)."""
    name = device_name.upper()
    if "H200" in name:
        return "H200"
    if "H100" in name and "PCIE" in name:
        return "H100 PCIe"
    if "H100" in name and ("SXM" in name or "HBM3" in name) and "NVL" not in name:
        return "H100 SXM"
    if "A100" in name:
        return "A100"
    return None


# --------------------------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    """The GPU as nvidia-smi names it, and the versions that computed the numbers."""
    import torch

    info: dict[str, Any] = {
        "kind": "machine",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "cpu_count": os.cpu_count(),
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        info["nvidia_smi"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        info["nvidia_smi"] = None
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info["gpu"] = properties.name
        info["gpu_memory_gib"] = round(properties.total_memory / 2**30, 1)
        info["compute_capability"] = f"{properties.major}.{properties.minor}"
        info["gpu_count"] = torch.cuda.device_count()
    try:
        from importlib.metadata import version

        info["transformers"] = version("transformers")
    except Exception:  # not installed: the peer step says so
        info["transformers"] = None
    return info


# ---------------------------------------------------------------------------------- reading
def read_results(work: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the machine line, the step lines) of WORK/results.jsonl; lines that are not JSON (a
    step killed while writing one) are left out."""
    lines = []
    path = work / "results.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    machines = [line for line in lines if line.get("kind") == "machine"]
    steps = [line for line in lines if line.get("kind") == "step"]
    return (machines[-1] if machines else {}), steps


def read_artifact(work: Path, step: dict[str, Any]) -> Any:
    """The JSON a step wrote (None: no file, or not JSON, e.g. cut off by a timeout)."""
    name = step.get("artifact")
    if not name or not (work / name).is_file():
        return None
    try:
        return json.loads((work / name).read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def log_tail(work: Path, step: dict[str, Any], lines: int = 12) -> list[str]:
    path = work / step["log"] if step.get("log") else None
    if path is None or not path.is_file():
        return []
    return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]


def suite_counts(xml_path: Path) -> dict[str, Any] | None:
    """Passed, failed, errors and skipped tests of pytest's JUnit XML, with the failed tests'
    names and first message lines and the skip reasons (None: no file or not complete)."""
    if not xml_path.is_file():
        return None
    try:
        root = ElementTree.parse(xml_path).getroot()
    except ElementTree.ParseError:
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failed, skipped = [], {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((child for child in case if child.tag in ("failure", "error")), None)
        skip = case.find("skipped")
        if outcome is not None:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            message = (outcome.get("message") or "").strip().splitlines()
            failed.append({"test": name, "message": message[0][:300] if message else ""})
        elif skip is not None:
            counts["skipped"] += 1
            reason = (skip.get("message") or "").strip()
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            counts["passed"] += 1
    counts["total"] = sum(counts.values())
    return {**counts, "failed_tests": failed, "skip_reasons": skipped}


# ----------------------------------------------------------------------------------- figures
def _decode_rates(rows: list[dict[str, Any]] | None, batch_size: int) -> dict[str, Any]:
    found = {}
    for row in rows or []:
        if row.get("batch_size") == batch_size:
            found[row["search"]] = row["sentences_per_sec"]
    return found


def mfu(gflops: float | None, machine_info: dict[str, Any], precision: str) -> float | None:
    key = peak_key(machine_info.get("gpu") or machine_info.get("nvidia_smi") or "")
    if gflops is None or key is None:
        return None
    return round(gflops / (PEAKS[key]["tflops"][precision] * 1000), 4)


def attnseq_row(step: dict[str, Any], report: Any, machine_info: dict[str, Any]) -> dict:
    """One configuration's figures from benchmark.py's report (None where it has none)."""
    row: dict[str, Any] = {
        "system": "attnseq",
        "configuration": step.get("label"),
        "model": step.get("model"),
        "precision": step.get("precision"),
        "compile": bool(step.get("compile")),
        "status": step["status"],
    }
    result = (report or {}).get("results", [None])[0] or {}
    train = result.get("train", {})
    decode = result.get("decode")
    gflops = train.get("model_gflops_per_sec")
    row.update(
        tgt_tokens_per_sec=train.get("tgt_tokens_per_sec"),
        src_tgt_tokens_per_sec=train.get("src_tgt_tokens_per_sec"),
        model_tflops_per_sec=None if gflops is None else round(gflops / 1000, 2),
        mfu=mfu(gflops, machine_info, step.get("precision", "fp32")),
        train_peak_mib=result.get("memory_after_training", {}).get("cuda_max_allocated_mib"),
        decode_peak_mib=(result.get("memory_at_end", {}).get("cuda_max_allocated_mib")
                         if decode else None),
        decode_sentences=decode[0]["sentences"] if decode else None,
        greedy_64=_decode_rates(decode, 64).get("greedy"),
        beam5_64=_decode_rates(decode, 64).get("beam5"),
        greedy_1=_decode_rates(decode, 1).get("greedy"),
        beam5_1=_decode_rates(decode, 1).get("beam5"),
        parameters=result.get("parameters"),
        sec_per_step=train.get("sec_per_step"),
        timed_steps=train.get("timed_steps"),
        skipped_updates=train.get("skipped_updates"),
        measured_fp32_matmul_gflops=(report or {}).get("matmul_gflops", {}).get("peak_gflops"),
    )  # fmt: skip
    return row


def peer_rows(step: dict[str, Any], report: Any, machine_info: dict[str, Any]) -> list[dict]:
    """The peer's training runs, each with the (float32) generation figures."""
    if not report:
        return [{"system": "HF Marian (peer)", "status": step["status"]}]
    generate = report.get("generate") or []
    rates = _decode_rates(generate, 64)
    rows = []
    for run in report.get("train", []):
        gflops = run.get("model_gflops_per_sec")
        rows.append(
            {
                "system": "HF Marian (peer)",
                "configuration": f"peer transformer {run['precision']}",
                "model": "transformer",
                "precision": run["precision"],
                "compile": False,
                "status": step["status"],
                "tgt_tokens_per_sec": run.get("steady_tgt_tokens_per_sec"),
                "tgt_tokens_per_sec_whole_run": run.get("tgt_tokens_per_sec"),
                "model_tflops_per_sec": None if gflops is None else round(gflops / 1000, 2),
                "mfu": mfu(gflops, machine_info, run["precision"]),
                "train_peak_mib": run.get("cuda_max_allocated_mib"),
                "decode_peak_mib": generate[0].get("cuda_max_allocated_mib") if generate else None,
                "decode_sentences": generate[0]["sentences"] if generate else None,
                "greedy_64": rates.get("greedy"),
                "beam5_64": rates.get("beam5"),
                "steps": run.get("steps"),
                "train_seconds": run.get("train_seconds"),
                "transformers": report.get("transformers"),
            }
        )
    return rows


def collect(work: Path, mode: str) -> dict[str, Any]:
    """Everything the report shows, as the JSON file holds it."""
    machine_info, steps = read_results(work)
    configurations: list[dict[str, Any]] = []
    suite = None
    problems = []
    for step in steps:
        artifact = read_artifact(work, step)
        if step["name"] == "suite":
            suite = suite_counts(work / (step.get("artifact") or "suite.xml"))
        elif step["name"] == "bench":
            configurations.append(attnseq_row(step, artifact, machine_info))
        elif step["name"] == "peer":
            configurations.extend(peer_rows(step, artifact, machine_info))
        if step["status"] in ("failed", "timeout"):
            problems.append({"step": step.get("label"), "log_tail": log_tail(work, step)})
    key = peak_key(machine_info.get("gpu") or machine_info.get("nvidia_smi") or "")
    return {
        "mode": mode,
        "machine": {k: v for k, v in machine_info.items() if k != "kind"},
        "peak": None if key is None else {"device": key, **PEAKS[key]},
        "steps": [
            {k: step.get(k) for k in ("label", "status", "exit", "seconds", "limit")}
            for step in steps
        ],
        "suite": suite,
        "configurations": configurations,
        "problems": problems,
    }


# ---------------------------------------------------------------------------------- markdown
def _cell(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(data: dict[str, Any]) -> str:
    machine_info, peak = data["machine"], data["peak"]
    lines = ["# attnseq on a GPU", ""]
    lines += [
        f"Measured by `benchmarks/gpu_check.sh{' --quick' if data['mode'] == 'quick' else ''}` "
        f"on {machine_info.get('date', 'an unrecorded date')}. Re-run it to replace this page.",
        "",
        f"- GPU (nvidia-smi): `{machine_info.get('nvidia_smi') or 'nvidia-smi gave nothing'}`",
        f"- torch {machine_info.get('torch') or '?'}, CUDA {machine_info.get('cuda') or 'none'}, "
        f"cuDNN {machine_info.get('cudnn') or 'none'}, Python {machine_info.get('python') or '?'}, "
        f"transformers {machine_info.get('transformers') or 'not installed'}",
    ]
    if peak is not None:
        tflops = peak["tflops"]
        lines.append(
            f"- MFU denominators ({peak['device']}, dense TFLOP/s): bf16/fp16 {tflops['bf16']}, "
            f"TF32 {tflops['tf32']}, fp32 {tflops['fp32']}; {peak['source']}"
        )
    else:
        lines.append(
            "- MFU left out: this GPU is not in benchmarks/gpu_report.py's table of dense peaks"
        )
    lines += ["", "## Steps", "", "| step | status | seconds | limit |", "|---|---|---:|---:|"]
    for step in data["steps"]:
        lines.append(
            f"| {step['label']} | {step['status']} | {_cell(step['seconds'], 1)} | "
            f"{_cell(step['limit'])} |"
        )
    lines += ["", "## GPU suite (`pytest -m gpu tests/gpu`)", ""]
    suite = data["suite"]
    if suite is None:
        lines.append("No result: the suite did not run to its end (see the steps above).")
    else:
        lines.append(
            f"{suite['passed']} passed, {suite['failed']} failed, {suite['errors']} errors, "
            f"{suite['skipped']} skipped ({suite['total']} tests)."
        )
        for failure in suite["failed_tests"]:
            lines.append(f"- failed: `{failure['test']}`: {failure['message']}")
        for reason, count in suite["skip_reasons"].items():
            lines.append(f"- skipped ({count}): {reason}")
    lines += [
        "",
        "## Training and decoding speed, Multi30k de→en",
        "",
        "Target tokens/s of training updates (real target tokens, no padding; the peer's after "
        "its first 10 steps), model TFLOP/s and MFU (split estimate; denominators above), peak "
        "GPU memory (`torch.cuda.max_memory_allocated`) in training and in decoding, and "
        "sentences/s of greedy and beam-5 search at batch 64 over the first test2016 sentences "
        "(attnseq sorts them by length, as `attnseq translate` does; the peer keeps file order, "
        "as its own evaluation does). The models have trained for seconds, so outputs tend to "
        "run to the length limit: decoding figures are of the search, not of a trained model.",
        "",
        "| system | configuration | status | target tok/s | TFLOP/s | MFU | train MiB | "
        "greedy sent/s | beam-5 sent/s | decode MiB | sentences |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["configurations"]:
        mfu_cell = "–" if row.get("mfu") is None else f"{100 * row['mfu']:.1f}%"
        lines.append(
            f"| {row['system']} | {_cell(row.get('configuration'))} | {row['status']} | "
            f"{_cell(row.get('tgt_tokens_per_sec'))} | {_cell(row.get('model_tflops_per_sec'), 2)} "
            f"| {mfu_cell} | {_cell(row.get('train_peak_mib'))} | "
            f"{_cell(row.get('greedy_64'), 1)} | {_cell(row.get('beam5_64'), 1)} | "
            f"{_cell(row.get('decode_peak_mib'))} | {_cell(row.get('decode_sentences'))} |"
        )
    if data["problems"]:
        lines += ["", "## Steps that failed", ""]
        for problem in data["problems"]:
            lines += [f"{problem['step']}, the end of its log:", "", "```"]
            lines += problem["log_tail"] or ["(no log)"]
            lines += ["```", ""]
    lines += [
        "",
        "Reproduce: `benchmarks/gpu_prepare.sh` on a machine with the package index, then "
        "`benchmarks/gpu_check.sh` on the GPU machine with `.gpu-wheels/` and `.gpu-data/` beside "
        'the checkout (docs/results/benchmark.md, "On a GPU").',
    ]
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("machine", help="print the machine's JSON line")
    write = commands.add_parser("write", help="write the report from a work folder")
    write.add_argument("work", type=Path, help="the folder holding results.jsonl")
    write.add_argument("--mode", choices=["full", "quick"], default="full")
    write.add_argument("--md", type=Path, required=True, help="the Markdown page to write")
    write.add_argument("--json", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    if args.command == "machine":
        print(json.dumps(machine()))
        return 0
    data = collect(args.work, args.mode)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.md, markdown(data))
    atomic_write_json(args.json, data)
    print(f"wrote {args.md} and {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
