#!/usr/bin/env bash
# Engineer RL from mapf-base-indep-v3 (ledgers/pilots/engineer-rl-v3.toml; issue "Engineers that
# diagnose", item 5). main runs the demo's 3 GRPO stages with `current+engineer-rl`;
# control forks it at stage 1 with `current` and runs the same stages without engineer
# RL. Then `ledger engineer eval` scores, on the same held-out synthetic contexts and
# with main@stage0 as the reference policy: random (the paired rows' baseline),
# heuristic, learnability, the base (main@stage0), control@stage3 and main@stage3.
# Resumable: run it again after a stop. `make engineer-rl-v4` runs the same steps on
# ledgers/pilots/engineer-rl-v4.toml (from mapf-base-indep-v4, engineer text revision 3).
#   LEDGER_BIN (default target/release/ledger)   ERL_PLAN   (default ledgers/pilots/engineer-rl-v3.toml)
#   ERL_LEDGER (default ledgers/<plan's name>)   ERL_OUT    (default ledgers/results/<plan's name>)
#   ERL_CONTEXTS (default 100)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
PLAN=${ERL_PLAN:-ledgers/pilots/engineer-rl-v3.toml}
NAME=$(basename "$PLAN" .toml)
DIR=${ERL_LEDGER:-ledgers/$NAME}
OUT=${ERL_OUT:-ledgers/results/$NAME}
CONTEXTS=${ERL_CONTEXTS:-100}
start=$SECONDS
mkdir -p "$OUT"
[[ -d $DIR ]] || "$BIN" --ledger "$DIR" init --plan "$PLAN"
"$BIN" --ledger "$DIR" run --quiet
if ! "$BIN" --ledger "$DIR" branches | grep -q '^control '; then
    "$BIN" --ledger "$DIR" fork --at stage1 --engineer current --name control
fi
"$BIN" --ledger "$DIR" run --branch control --quiet
"$BIN" --ledger "$DIR" audit --branch main > "$OUT/audit-main.txt"
"$BIN" --ledger "$DIR" audit --branch control > "$OUT/audit-control.txt"
"$BIN" --ledger "$DIR" compare control main > "$OUT/compare-control-main.txt"
"$BIN" --ledger "$DIR" engineer eval \
    --engineer random,heuristic,learnability,base=main@stage0,current=control@stage3,current=main@stage3 \
    --reference main@stage0 --plan "$PLAN" --contexts "$CONTEXTS" --json > "$OUT/engineer-eval.json"
"$BIN" --ledger "$DIR" branches > "$OUT/branches.txt"
# Engineer RL is recorded like plan training: the last stage recomputes bit for bit.
"$BIN" --ledger "$DIR" replay --verify --branch main --stage 3 | tee "$OUT/replay-main-stage3.txt"
echo "$NAME: $((SECONDS - start)) s; ledger $DIR, results in $OUT"
