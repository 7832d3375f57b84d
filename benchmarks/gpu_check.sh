#!/usr/bin/env bash
# Check and measure attnseq's GPU path on one GPU machine, in one command, and write the report
# docs/results/gpu.md and docs/results/gpu.json.
#
# Usage: benchmarks/gpu_check.sh [--quick] [--help]
#
#   (full)   at most 8 minutes on one H100:
#            1. install what the GPU image lacks from .gpu-wheels/ (benchmarks/gpu_prepare.sh
#               made it) into the run's folder, on PYTHONPATH with the checkout (attnseq runs
#               from source: python3 -m attnseq);
#            2. the GPU suite, pytest -m gpu tests/gpu (about 3 minutes);
#            3. benchmarks/benchmark.py --device cuda on Multi30k (.gpu-data/multi30k): the
#               transformer in fp32 (with decoding), bf16 and bf16 + torch.compile, the GRU +
#               Bahdanau model in fp32 (with decoding) and bf16 (about 3 minutes);
#            4. the Hugging Face Marian peer of the same size (benchmarks/gpu_peer.py): training
#               tokens/s in fp32 and bf16, greedy and beam-5 generate sentences/s (about 1 minute);
#            5. the report (benchmarks/gpu_report.py).
#   --quick  at most 3 minutes: the same steps with a subset of the suite (fp32 training of two
#            variants, decoding, kernels, resume), the transformer in fp32 only and the peer in
#            fp32 only, with shorter runs.
#
# Every step has its own time limit, and none starts past the whole run's deadline (8 or 3
# minutes from the start, less the report's share): a hang costs its step, not the run. A step
# that fails or times out is marked so in the report, which is written in any case.
#
# Environment:
#   OUT             also copy the report, the step lines, this run's console log and a tarball of
#                   every log there (5 files)
#   GPU_CHECK_TMP   where the run's own folder of logs, artifacts and installed wheels is made
#                   (/tmp)
#   GPU_REPORT_DIR  where gpu.md and gpu.json go (docs/results)
#   PYTHON          the interpreter (python3)
#   GPU_WHEELS      the wheel folder (.gpu-wheels)      GPU_DATA  the data folder (.gpu-data)
# Exit status: 0 when every step succeeded, 1 otherwise (the report is written either way),
# 2 for a usage error.
set -uo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
MODE=full
for argument in "$@"; do
  case $argument in
    --quick) MODE=quick ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: unknown argument $argument (see --help)" >&2; exit 2 ;;
  esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 2
PYTHON=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$REPO/.gpu-wheels}
DATA=${GPU_DATA:-$REPO/.gpu-data}
REPORT_DIR=${GPU_REPORT_DIR:-docs/results}
CHECK_DIR=$(mktemp -d "${GPU_CHECK_TMP:-/tmp}/gpu-check.XXXXXX") || exit 2
mkdir "$CHECK_DIR/site" || exit 2
RESULTS=$CHECK_DIR/results.jsonl
: >"$RESULTS"
exec > >(tee "$CHECK_DIR/check.log") 2>&1

export PYTHONPATH="$CHECK_DIR/site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export ATTNSEQ_DATA=$DATA ATTNSEQ_CACHE=$CHECK_DIR/cache MPLBACKEND=Agg PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [[ $MODE == full ]]; then BUDGET=480; else BUDGET=180; fi
REPORT_SHARE=25  # seconds kept for the report and the copies
DEADLINE=$((SECONDS + BUDGET - REPORT_SHARE))
FAILURES=0

# [STEP_ARTIFACT=FILE] step NAME LABEL LIMIT EXTRA_JSON STDOUT_FILE COMMAND...
#   runs COMMAND (an executable: functions go through bash -c) for at most min(LIMIT, time
#   left) seconds. Its output goes to a log in CHECK_DIR; with STDOUT_FILE other than "-" its
#   stdout goes to CHECK_DIR/STDOUT_FILE (the step's artifact) and only its stderr to the log.
#   Appends the step's JSON line to RESULTS (EXTRA_JSON: more fields; STEP_ARTIFACT: an
#   artifact the command writes itself).
step() {
  local name=$1 label=$2 limit=$3 extra=$4 stdout=$5
  shift 5
  local log artifact=null status rc started seconds left
  log="$name-${label//[^A-Za-z0-9]/-}.log"
  [[ $stdout != - ]] && artifact="\"$stdout\""
  [[ -n ${STEP_ARTIFACT:-} ]] && artifact="\"$STEP_ARTIFACT\""
  left=$((DEADLINE - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 15)); then
    status=skipped rc=0 seconds=0
    echo "== $label: skipped, no time left"
  else
    echo "== $label (at most $limit s)"
    started=$SECONDS
    if [[ $stdout == - ]]; then
      timeout -k 10 "$limit" "$@" >"$CHECK_DIR/$log" 2>&1
    else
      timeout -k 10 "$limit" "$@" >"$CHECK_DIR/$stdout" 2>"$CHECK_DIR/$log"
    fi
    rc=$?
    seconds=$((SECONDS - started))
    case $rc in
      0) status=ok ;;
      124 | 137) status=timeout ;;  # timeout's TERM, or the KILL 10 s after it
      *) status=failed ;;
    esac
    echo "   $status after $seconds s (exit $rc); log $CHECK_DIR/$log"
  fi
  [[ $status == ok ]] || FAILURES=$((FAILURES + 1))
  local line='{"kind": "step", "name": "%s", "label": "%s", "status": "%s", "exit": %d, '
  line+='"seconds": %d, "limit": %d, "log": "%s", "artifact": %s%s}\n'
  # shellcheck disable=SC2059  # the format is the line above
  printf "$line" "$name" "$label" "$status" "$rc" "$seconds" "$limit" "$log" "$artifact" "$extra" \
    >>"$RESULTS"
}

# 1. what the image lacks, from the wheels (a distribution the image has is left alone)
install_wheels() {
  if [[ ! -d $WHEELS ]]; then
    echo "no $WHEELS: run benchmarks/gpu_prepare.sh where the package index is reachable"
    return 1
  fi
  local missing
  missing=$("$PYTHON" - "$WHEELS" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    name = wheel.name.split("-")[0]
    try:
        print(f"present: {name} {distribution(name).version}", file=sys.stderr)
    except PackageNotFoundError:
        print(wheel)
EOF
  ) || return 1
  echo "installing: ${missing//$'\n'/ }"
  if [[ -n $missing ]]; then
    # shellcheck disable=SC2086  # one wheel path per word
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$CHECK_DIR/site" $missing || return 1
  fi
  "$PYTHON" -c "import hydra, omegaconf, datasets, rouge_score, attnseq.cli.app; print('ok')"
}
export -f install_wheels
export WHEELS PYTHON CHECK_DIR
step install install 120 "" - bash -c install_wheels
step machine machine 60 "" machine.json "$PYTHON" benchmarks/gpu_report.py machine
[[ -s $CHECK_DIR/machine.json ]] && cat "$CHECK_DIR/machine.json" >>"$RESULTS"

# 2. the GPU suite (pytest-timeout, when installed, stops a single hung test)
suite=("$PYTHON" -m pytest -m gpu -p no:cacheprovider -q -rs tests/gpu)
suite+=(--junitxml="$CHECK_DIR/suite.xml")
"$PYTHON" -c "import pytest_timeout" 2>/dev/null && suite+=(--timeout=170)
if [[ $MODE == quick ]]; then
  two="rnn-bahdanau-additive-global or transformer-full-decoder-self"
  suite+=(-k "(fp32 and ($two)) or search_gives or kernels or resumed")
  STEP_ARTIFACT=suite.xml step suite "gpu suite (quick subset)" 110 "" - "${suite[@]}"
else
  STEP_ARTIFACT=suite.xml step suite "gpu suite" 210 "" - "${suite[@]}"
fi

# 3. attnseq on Multi30k (benchmarks/benchmark.py); 4. the peer
bench() {  # bench LABEL LIMIT MODEL PRECISION COMPILE DECODE STEPS WARMUP SETUP
  local file="bench-${1// /-}.json"
  step bench "$1" "$2" ", \"model\": \"$3\", \"precision\": \"$4\", \"compile\": $5" "$file" \
    "$PYTHON" benchmarks/benchmark.py "$9" --device cuda --threads 4 --steps "$7" --warmup "$8" \
    --decode-sentences "$6"
}
peer() {  # peer LIMIT BUDGET PRECISIONS
  step peer "peer HF Marian" "$1" "" peer.json "$PYTHON" benchmarks/gpu_peer.py "$DATA/peer" \
    "$DATA/multi30k" "$CHECK_DIR/peer" --budget "$2" --precisions "$3" --sentences 64 --device cuda
}
T=config=multi30k_transformer
R=config=multi30k_rnn_bahdanau
if [[ $MODE == quick ]]; then
  bench "transformer fp32" 50 transformer fp32 false 16 20 5 "$T"
  peer 45 10 fp32
else
  bench "transformer fp32" 100 transformer fp32 false 64 50 5 "$T"
  bench "transformer bf16" 60 transformer bf16 false 0 50 5 "$T trainer.precision=bf16"
  bench "rnn fp32" 100 rnn fp32 false 64 30 5 "$R"
  peer 100 20 fp32,bf16
  # compiling happens in the warm-up; dynamic shapes can recompile for a few more batches
  bench "transformer bf16 compile" 150 transformer bf16 true 0 50 10 \
    "$T trainer.precision=bf16 trainer.compile=true"
  bench "rnn bf16" 60 rnn bf16 false 0 30 5 "$R trainer.precision=bf16"
fi

# 5. the report, written whatever failed above
timeout 20 "$PYTHON" benchmarks/gpu_report.py write "$CHECK_DIR" --mode "$MODE" \
  --md "$REPORT_DIR/gpu.md" --json "$REPORT_DIR/gpu.json" || FAILURES=$((FAILURES + 1))
echo "== $FAILURES step(s) not ok; report: $REPORT_DIR/gpu.md ($SECONDS s in all)"
if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  cp "$REPORT_DIR/gpu.md" "$REPORT_DIR/gpu.json" "$RESULTS" "$OUT/" 2>/dev/null
  tar -C "$CHECK_DIR" -czf "$OUT/logs.tar.gz" --exclude=site --exclude=cache --exclude=peer . \
    2>/dev/null  # the installed wheels, attnseq's data cache and the peer's saved models
  cp "$CHECK_DIR/check.log" "$OUT/" 2>/dev/null
fi
((FAILURES == 0))
