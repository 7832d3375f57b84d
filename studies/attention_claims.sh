#!/usr/bin/env bash
# The trainings behind docs/results/attention_claims.md: five claims of the attention papers,
# each a Hydra multirun (three seeds per configuration) into runs/claims/STUDY, which
# `attnseq compare runs/claims/STUDY` then reads as one sweep folder (seeds pooled per
# configuration). Budgets are in updates, so a busy machine changes the minutes, not the models.
#
#   ATTNSEQ_DATA=../shared/data bash studies/attention_claims.sh STUDY...   # one or more studies
#   bash studies/attention_claims.sh --list
#
# Each training runs on one thread (trainer.threads=1) so that two studies can share a 2-core
# machine. A study whose folder exists is skipped: delete the folder to train it again.
set -euo pipefail

SEEDS="seed=1,2,3"
ONE_THREAD="trainer.threads=1"
# Multi30k GRU: 128-dim embeddings, a 256-unit decoder over 2x128 bidirectional annotations
# (2.0M parameters), 250 updates of 4,096 tokens (2.2 epochs), validated at 125 and 250.
MULTI30K_GRU="model.emb_dim=128 model.hidden=256 model.enc_hidden=128 trainer.max_steps=250 \
trainer.validate_every=125 $ONE_THREAD"

declare -A STUDIES=(
  # Bahdanau et al. 2015, figure 2: quality by source length with and without attention
  [bahdanau_multi30k]="config=multi30k_rnn_bahdanau $MULTI30K_GRU model.attention.score=additive,none"
  [bahdanau_copy]="data=copy data.min_len=3 data.max_len=40 data.vocab_size=100 \
model.attention.score=additive,none trainer.max_steps=800 trainer.validate_every=200 $ONE_THREAD"
  # Luong et al. 2015: global scores, and local-m / local-p windows (general score)
  [luong_global]="config=multi30k_rnn_luong $MULTI30K_GRU model.attention.score=dot,general,concat,location"
  [luong_local]="config=multi30k_rnn_luong $MULTI30K_GRU model.attention.window=local_m,local_p"
  # Vaswani et al. 2017: scaled vs unscaled dot products as d_k grows (3.2.1), and multi-head
  # vs single-head at equal d_model (table 3, row A): d_model 256, heads 8 (d_k 32) or 1 (256)
  [transformer_scaling]="config=reverse_transformer model.enc_layers=2 model.dec_layers=2 \
model.ff_dim=512 trainer.max_steps=500 trainer.validate_every=50 trainer.log_every=25 trainer.early_stopping_target=null \
$ONE_THREAD model.heads=8,1 model.attention.scaled=true,false"
  # Britz et al. 2017: additive (Luong's concat) vs multiplicative (general) across hidden
  # sizes, in the Luong decoder: hidden 256 is luong_global's concat and general, this is 128
  [britz_128]="config=multi30k_rnn_luong model.emb_dim=128 model.hidden=128 model.enc_hidden=64 \
trainer.max_steps=250 trainer.validate_every=125 $ONE_THREAD model.attention.score=concat,general"
)

if [[ "${1:-}" == "--list" || $# -eq 0 ]]; then
  for study in "${!STUDIES[@]}"; do echo "$study: attnseq train -m ${STUDIES[$study]} $SEEDS"; done
  exit 0
fi
for study in "$@"; do
  if [[ -z "${STUDIES[$study]:-}" ]]; then echo "unknown study $study (--list)" >&2; exit 2; fi
  folder="runs/claims/$study"
  if [[ -d "$folder" ]]; then echo "$folder exists: skipped"; continue; fi
  # shellcheck disable=SC2086  # the overrides are words
  attnseq train -m ${STUDIES[$study]} $SEEDS "hydra.sweep.dir=$folder"
done
