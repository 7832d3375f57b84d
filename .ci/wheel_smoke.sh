#!/usr/bin/env bash
# The package as a user gets it: the wheel built from this checkout, installed (not editable)
# with torch into a fresh virtualenv, then a short `attnseq train` and an `attnseq eval` of its
# best checkpoint from an empty folder, so nothing in the checkout (configs/, source tree) can
# stand in for what the wheel ships: the packaged configs are read from the installed package.
# Runs alone (`.ci/wheel_smoke.sh`) or from .ci/run.
# PYTHON picks the interpreter that builds the wheel and the virtualenv (default: python3).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

"$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$repo"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet torch==2.13.0 "$work"/dist/attnseq-*.whl

mkdir "$work/empty"
cd "$work/empty"
unset PYTHONPATH
export ATTNSEQ_CACHE="$work/cache"
attnseq="$work/venv/bin/attnseq"
"$attnseq" --version
"$attnseq" doctor
# The config groups come from the wheel (attnseq/configs/, mapped from the checkout's configs/)
config_dir="$("$work/venv/bin/python" -c 'from attnseq.config import CONFIG_DIR; print(CONFIG_DIR)')"
case "$config_dir" in
  */site-packages/attnseq/configs) ;;
  *) echo "wheel smoke test: configs read from $config_dir, not the wheel" >&2; exit 1 ;;
esac
composed="$("$attnseq" train config=reverse_rnn_luong --cfg job)"
grep -q "name: reverse" <<<"$composed" || {
  echo "wheel smoke test: config=reverse_rnn_luong did not compose from the wheel" >&2
  exit 1
}
"$attnseq" train trainer.max_steps=30 trainer.validate_every=15 data.train_size=200 \
  data.valid_size=50 data.test_size=50 model.hidden=32 model.emb_dim=16 hydra.run.dir=run
for file in run/checkpoints/best.pt run/metrics.json run/train.log; do
  test -f "$file" || { echo "wheel smoke test: $file missing after attnseq train" >&2; exit 1; }
done
"$attnseq" eval run/checkpoints/best.pt --split test --out eval
if [ -z "$(find eval -name '*.json')" ]; then
  echo "wheel smoke test: attnseq eval wrote no metrics into eval/" >&2
  exit 1
fi
if [ -n "$(ls -A "$work/empty" | grep -v -x -e run -e eval)" ]; then
  echo "wheel smoke test: unexpected files in the working folder: $(ls "$work/empty")" >&2
  exit 1
fi
echo "wheel smoke test passed in $((SECONDS - start)) s"
