#!/usr/bin/env bash
# The tables and figures of docs/results/attention_claims.md from the sweep folders that
# studies/attention_claims.sh trains: one `attnseq compare` per claim (markdown on stdout into
# NAME.md, its JSON and figure into NAME/), the transformer's training curves, and the speed
# of the attention scores.
#
#   ATTNSEQ_DATA=../shared/data bash studies/attention_claims_report.sh [NAME...]
#
# Names: bahdanau_multi30k bahdanau_copy luong_global luong britz_128 scaling_dk32 scaling_dk256 curves speed
# (default: all). Decoding runs on one thread so that the report can share the machine.
set -euo pipefail
out=docs/results/attention_claims
mkdir -p "$out"
export OMP_NUM_THREADS=1

compare() {  # NAME ARGS...: one comparison, its table and its figure
  local name=$1
  shift
  attnseq compare "$@" --format markdown --out "$out/$name" > "$out/$name.md"
  echo "wrote $out/$name.md and $out/$name/"
}

report() {
  case $1 in
    bahdanau_multi30k) compare "$1" runs/claims/bahdanau_multi30k --no-attention \
        --baseline model.attention.score=none --buckets 0,10,15,20,25 ;;
    bahdanau_copy) compare "$1" runs/claims/bahdanau_copy --no-attention \
        --baseline model.attention.score=none --buckets 0,10,20,30 ;;
    luong_global) compare "$1" runs/claims/luong_global --no-attention \
        --baseline model.attention.score=general ;;
    luong) compare "$1" runs/claims/luong_global runs/claims/luong_local --no-attention \
        --baseline model.attention.score=general ;;
    britz_128) compare "$1" runs/claims/britz_128 --no-attention \
        --baseline model.attention.score=general ;;
    scaling_dk32) compare "$1" runs/claims/transformer_scaling \
        --baseline "model.heads=8,model.attention.scaled=True" ;;
    scaling_dk256) compare "$1" runs/claims/transformer_scaling \
        --baseline "model.heads=1,model.attention.scaled=True" ;;
    curves) python studies/attention_claims_curves.py runs/claims/transformer_scaling \
        --tags valid/loss train/grad_norm attention/entropy --log train/grad_norm \
        --out "$out/transformer_scaling_curves.png" > "$out/transformer_scaling_curves.json" ;;
    speed) python benchmarks/benchmark.py --threads 1 --steps 15 --decode-sentences 50 \
        "config=multi30k_rnn_luong model.emb_dim=128 model.hidden=256 model.enc_hidden=128 model.attention.score=concat" \
        "config=multi30k_rnn_luong model.emb_dim=128 model.hidden=256 model.enc_hidden=128 model.attention.score=general" \
        "config=multi30k_rnn_luong model.emb_dim=128 model.hidden=256 model.enc_hidden=128 model.attention.score=dot" \
        "config=multi30k_rnn_luong model.emb_dim=128 model.hidden=128 model.enc_hidden=64 model.attention.score=concat" \
        "config=multi30k_rnn_luong model.emb_dim=128 model.hidden=128 model.enc_hidden=64 model.attention.score=general" \
        "config=multi30k_rnn_luong model.emb_dim=128 model.hidden=128 model.enc_hidden=64 model.attention.score=dot" \
        > "$out/speed.json" ;;
    *) echo "unknown report $1" >&2; exit 2 ;;
  esac
}

names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=(bahdanau_multi30k bahdanau_copy luong_global luong britz_128 scaling_dk32 scaling_dk256 curves speed)
for name in "${names[@]}"; do report "$name"; done
