#!/usr/bin/env bash
# `make demo`: the paper's loop at demo scale on ledgers/demo.toml.
#   1. init a ledger (ledgers/demo-run, recreated on every run),
#   2. run it: stage 0 warm-up (the base model), then 3 GRPO stages, each designed by the
#      `current` engineer (the latest checkpoint probing its own pass rates),
#   3. fork at stage 1 with the `base` engineer (the stage-0 weights design from stage 1 on),
#   4. run the fork, and
#   5. print both branches side by side in the paper's layout, then verify the ledger.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LEDGER_BIN:-target/release/ledger}
DIR=${DEMO_LEDGER:-ledgers/demo-run}
rm -rf "$DIR"
"$BIN" --ledger "$DIR" init --plan ledgers/demo.toml
echo "== run: warm-up + 3 stages designed by the current checkpoint =="
"$BIN" --ledger "$DIR" run --engineer current
echo "== fork at stage 1: the base model designs stages 1-3 =="
"$BIN" --ledger "$DIR" fork --at stage1 --engineer base --name base-at1
"$BIN" --ledger "$DIR" run --branch base-at1
echo
"$BIN" --ledger "$DIR" compare main base-at1
echo
"$BIN" --ledger "$DIR" verify
echo "ledger: $DIR  (try: ledger --ledger $DIR log | branches | show main@stage2 | audit)"
