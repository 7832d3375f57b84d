#!/usr/bin/env bash
# Prepare, on a machine with the package index and ../shared, what benchmarks/gpu_check.sh needs on
# a bare GPU machine that can download nothing. Both folders are git-ignored and travel beside
# the checkout (a GPU tool's `carry`).
#
#   .gpu-wheels/  CPython 3.12 manylinux x86_64 wheels of what attnseq needs beyond the GPU
#                 image (torch, transformers, sentencepiece, sacrebleu, tensorboard, pyarrow,
#                 typer, rich, matplotlib, pytest, pytest-xdist and their dependencies are there):
#                 Hydra and OmegaConf (with the ANTLR runtime), datasets (with dill, multiprocess,
#                 xxhash, fsspec, pandas), rouge-score (with nltk, joblib, defusedxml, six),
#                 accelerate and psutil (the peer's Seq2SeqTrainer needs them) and
#                 pytest-timeout; gpu_check.sh installs only those the image lacks. The
#                 versions are those attnseq is tested with. Two of them are only published
#                 as source (antlr4-python3-runtime, rouge-score): they are pure Python and are
#                 built into py3-none-any wheels here.
#                 Left out: ctranslate2. Its manylinux wheel is 41 MiB, which with the rest would
#                 not fit what travels, and its CUDA build loads libcublas.so.12 while the GPU
#                 image's torch brings CUDA 13; the CTranslate2 GPU test then skips with a reason.
#   .gpu-data/    multi30k/  train, val and test_2016_flickr in de and en (benchmarks/benchmark.py's
#                            multi30k configs read them with ATTNSEQ_DATA=.gpu-data)
#                 peer/      the Hugging Face Marian peer of bench/peers (hf_seq2seq.py, called
#                            by benchmarks/gpu_peer.py) and its joint 8,000-piece SentencePiece
#                            model, trained here by the peers' own prep_spm.py
#
# Usage: benchmarks/gpu_prepare.sh [--help]
# Environment: PYTHON (python3) runs pip; SPM_PYTHON (.venv/bin/python, else python3) has
# sentencepiece; SHARED (../shared beside the checkout) holds data/multi30k and bench/peers.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

REPO=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=$REPO/.gpu-wheels
DATA=$REPO/.gpu-data
SHARED=${SHARED:-$REPO/../shared}
PYTHON=${PYTHON:-python3}
if [[ -z ${SPM_PYTHON:-} ]]; then
  SPM_PYTHON=python3
  [[ -x $REPO/.venv/bin/python ]] && SPM_PYTHON=$REPO/.venv/bin/python
fi
LIMIT_MIB=50  # both folders together; the checkout and what it carries travel within 64 MiB

WHEEL_SPECS=(
  hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 fsspec==2026.9.0 pandas==3.1.1
  rouge-score==0.1.2 nltk==3.10.4 joblib==1.6.0 defusedxml==0.7.1 six==1.17.0
  accelerate==1.15.0 psutil==7.2.2 pytest-timeout==2.4.0
)
PLATFORM=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

for needed in "$SHARED/data/multi30k/train.de" "$SHARED/bench/peers/hf_seq2seq.py"; do
  [[ -f $needed ]] || { echo "error: $needed not found (set SHARED)" >&2; exit 2; }
done

rm -rf "$WHEELS" "$DATA"
mkdir -p "$WHEELS" "$DATA/multi30k" "$DATA/peer"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

for spec in "${WHEEL_SPECS[@]}"; do
  if ! "$PYTHON" -m pip download -q --no-deps --only-binary=:all: "${PLATFORM[@]}" \
      -d "$WHEELS" "$spec" 2>"$build/pip.err"; then
    # published as a source archive only: build it here, and use it only if it is pure Python
    "$PYTHON" -m pip wheel -q --no-deps -w "$build/$spec" "$spec"
    wheel=$(ls "$build/$spec"/*.whl)
    case $wheel in
      *-py3-none-any.whl | *-py2.py3-none-any.whl) mv "$wheel" "$WHEELS/" ;;
      *) echo "error: $spec has no CPython 3.12 wheel and builds to $wheel" >&2; exit 1 ;;
    esac
  fi
  echo "wheel: $spec"
done
count=$(ls "$WHEELS"/*.whl | wc -l)
if [[ $count -ne ${#WHEEL_SPECS[@]} ]]; then
  echo "error: $count wheels for ${#WHEEL_SPECS[@]} specs" >&2
  exit 1
fi

for split in train val test_2016_flickr; do
  for lang in de en; do
    cp "$SHARED/data/multi30k/$split.$lang" "$DATA/multi30k/"
  done
done
cp "$SHARED/bench/peers/hf_seq2seq.py" "$DATA/peer/"
chmod -R u+w "$DATA"  # the shared copies are read-only
if ! "$SPM_PYTHON" "$SHARED/bench/peers/prep_spm.py" "$DATA/multi30k" "$DATA/peer/spm" \
    >"$build/spm.log" 2>&1; then
  cat "$build/spm.log" >&2
  exit 1
fi
# Joey's vocabulary files go: the peer reads spm.model only
rm -f "$DATA/peer/spm/vocab.txt" "$DATA/peer/spm/spm.vocab"

du -sh "$WHEELS" "$DATA"
total_kib=$(du -sk "$WHEELS" "$DATA" | awk '{s += $1} END {print s}')
if ((total_kib > LIMIT_MIB * 1024)); then
  echo "error: .gpu-wheels and .gpu-data hold $((total_kib / 1024)) MiB, over $LIMIT_MIB MiB" >&2
  exit 1
fi
echo "ready: $count wheels and the data, $((total_kib / 1024)) MiB; carry .gpu-wheels and .gpu-data"
