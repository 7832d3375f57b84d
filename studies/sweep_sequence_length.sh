#!/usr/bin/env bash
# Attention versus the fixed-vector bottleneck: reverse sequences of fixed length L
# with GRU + Bahdanau attention (model=rnn_bahdanau) and without attention (model=rnn_none),
# the same budget of updates for both, then one table per length via `attnseq sweep-report`
# (or the test/exact_match column of each job's metrics.json).
#
#   bash studies/sweep_sequence_length.sh [STEPS] [LENGTHS...]     # default: 1500 steps; 5 10 20 30
#   EXTRA="trainer.threads=1 seed=2" bash studies/sweep_sequence_length.sh   # more overrides
set -euo pipefail
steps="${1:-1500}"
shift || true
lengths=("${@:-5 10 20 30}")
out="multirun/sequence_length"
for length in ${lengths[@]}; do
  attnseq train -m model=rnn_bahdanau,rnn_none data=reverse \
    data.min_len="$length" data.max_len="$length" data.train_size=20000 \
    trainer.max_steps="$steps" trainer.max_epochs=100000 trainer.validate_every=500 \
    trainer.early_stopping_patience=0 \
    hydra.sweep.dir="$out/L$length" ${EXTRA:-}
done
python - "$out" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
print("| length | rnn_bahdanau exact match | rnn_none exact match | rnn_bahdanau BLEU | rnn_none BLEU |")
print("|---|---|---|---|---|")
for sweep in sorted(root.iterdir(), key=lambda p: int(p.name[1:])):
    rows = {}
    for job in sweep.iterdir():
        if not (job / "metrics.json").is_file():
            continue
        model = "rnn_none" if "model=rnn_none" in (job / ".hydra/overrides.yaml").read_text() else "rnn_bahdanau"
        rows[model] = json.loads((job / "metrics.json").read_text())
    b, n = rows.get("rnn_bahdanau", {}), rows.get("rnn_none", {})
    print(f"| {sweep.name[1:]} | {b.get('test/exact_match', float('nan')):.3f} | {n.get('test/exact_match', float('nan')):.3f} "
          f"| {b.get('test/bleu', float('nan')):.1f} | {n.get('test/bleu', float('nan')):.1f} |")
PY
