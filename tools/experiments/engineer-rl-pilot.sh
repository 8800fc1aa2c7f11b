#!/usr/bin/env bash
# The engineer-RL pilot (ledgers/pilots/engineer-rl-pilot.toml): main trains its engineer in
# stage 1, the control forks it at stage 1 without engineer RL, then `ledger engineer
# eval` scores stage 0 (base), the control's stage 1 and main's stage 1 as engineers on
# the same held-out synthetic contexts, the reference policy being stage 0.
#   LEDGER_BIN  (default target/release/ledger)   PILOT_LEDGER (default ledgers/engineer-rl-pilot)
#   PILOT_CONTEXTS (default 120)                   PILOT_OUT    (default ledgers/results/engineer-rl-pilot)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
DIR=${PILOT_LEDGER:-ledgers/engineer-rl-pilot}
OUT=${PILOT_OUT:-ledgers/results/engineer-rl-pilot}
CONTEXTS=${PILOT_CONTEXTS:-120}
PLAN=ledgers/pilots/engineer-rl-pilot.toml
mkdir -p "$OUT"
[[ -d $DIR ]] || "$BIN" --ledger "$DIR" init --plan "$PLAN"
"$BIN" --ledger "$DIR" run
if ! "$BIN" --ledger "$DIR" branches | grep -q '^control '; then
    "$BIN" --ledger "$DIR" fork --at stage1 --engineer current --name control
fi
"$BIN" --ledger "$DIR" run --branch control
"$BIN" --ledger "$DIR" replay --verify --branch main --stage 1
"$BIN" --ledger "$DIR" audit --branch main > "$OUT/audit-main.txt"
"$BIN" --ledger "$DIR" engineer eval \
    --engineer current=control@stage1,current=main@stage1,base=main@stage0 \
    --reference main@stage0 --plan "$PLAN" --contexts "$CONTEXTS" --json > "$OUT/engineer-eval.json"
"$BIN" --ledger "$DIR" branches > "$OUT/branches.txt"
echo "engineer-rl-pilot: ledger $DIR, results in $OUT"
