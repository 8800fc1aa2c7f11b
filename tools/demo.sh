#!/usr/bin/env bash
# `make demo`: the paper's loop at demo scale on ledgers/demo.toml.
#   1. init a ledger (ledgers/demo-run, recreated on every run);
#   2. run it: stage 0 loads and evaluates the shipped base planner the plan names
#      (ledgers/models/mapf-reader-v3, an HF directory; its README says how it was made), then
#      3 GRPO stages, each designed by the `current` engineer (the latest checkpoint
#      reads the evidence and writes the next configuration itself);
#   3. fork at stage 2 with the `base` engineer (the stage-0 model designs stages 2-3;
#      at stage 1 the current checkpoint *is* the base model, so forking there would
#      compare the model with itself) and run the fork;
#   4. print both branches side by side in the paper's layout and the decisions each
#      made, verify the ledger, and write the HTML report (LEDGER/report/index.html).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
DIR=${DEMO_LEDGER:-ledgers/demo-run}
PLAN=${DEMO_PLAN:-ledgers/demo.toml}
start=$SECONDS
rm -rf "$DIR"
# DEMO_SEED=N: the same plan with another seed (training data, sampling, engineers'
# replies; the suites keep their own seed, so every seed is scored on the same items).
if [[ -n "${DEMO_SEED:-}" ]]; then
    seeded=$(mktemp --suffix=.toml)
    trap 'rm -f "$seeded"' EXIT
    sed "s/^seed = .*/seed = ${DEMO_SEED}/" "$PLAN" > "$seeded"
    PLAN=$seeded
fi
"$BIN" --ledger "$DIR" init --plan "$PLAN"
echo "== run: the shipped base model (stage 0) + 3 stages designed by the current checkpoint =="
"$BIN" --ledger "$DIR" run --engineer current
echo "== fork at stage 2: the base model designs stages 2-3 =="
"$BIN" --ledger "$DIR" fork --at stage2 --engineer base --name base-at2
"$BIN" --ledger "$DIR" run --branch base-at2
echo
"$BIN" --ledger "$DIR" compare main base-at2 --decisions
echo
"$BIN" --ledger "$DIR" verify
"$BIN" --ledger "$DIR" report --out "$DIR/report"
echo "demo: $((SECONDS - start)) s; ledger: $DIR  (try: ledger --ledger $DIR log | branches | show main@stage2 | audit --branch base-at2)"
