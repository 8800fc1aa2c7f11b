#!/usr/bin/env bash
# `make base-model`: re-make the shipped base planner, ledgers/models/mapf-base/.
#   1. init a ledger from ledgers/base.toml (ledgers/base-run; kept if it exists, so a
#      stopped run resumes where its last durable point left it: every 250 steps);
#   2. run stage 0 (the pretraining; a progress bar on a terminal; `ledger --ledger
#      ledgers/base-run log --follow` from another terminal shows it as it goes);
#   3. verify the ledger, export main@stage0 as an HF directory to ledgers/models/mapf-base
#      (or $BASE_MODEL_OUT) and score it with `ledger eval`.
# On 2 cores the run takes about 75 minutes. To run it in the background:
#   nohup make base-model > base-model.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
DIR=${BASE_LEDGER:-ledgers/base-run}
PLAN=${BASE_PLAN:-ledgers/base.toml}
OUT=${BASE_MODEL_OUT:-ledgers/models/mapf-base}
# The card's own text (ledgers/cards/NAME.md); a retired model's card also holds the
# provenance, scores and plan it was made with, which are written afresh below.
CARD=${BASE_CARD:-ledgers/cards/mapf-base.md}
# cpu (the default) or cuda[:N]: where stage 0 trains (recorded in the ledger's metadata;
# the same recipe on another device gives a model of the same recipe, not the same bits).
DEVICE=${BASE_DEVICE:-cpu}
# Extra `ledger eval` flags for the model card's scores (e.g. the study's stratified
# suites: `--per-cell 48 --wait-ratios 0.25,0.5,0.75`).
EVAL_VAL=${BASE_EVAL_VAL:---per-cell 20}
EVAL_TEST=${BASE_EVAL_TEST:---per-cell 10}
start=$SECONDS
if [[ ! -e "$DIR" ]]; then
    "$BIN" --ledger "$DIR" init --plan "$PLAN"
else
    echo "resuming $DIR"
fi
# Stage 0 only (the plan's later stages are not part of the base model): `run --stages 1`
# finishes an interrupted stage 0, and is skipped once stage 0 is complete.
if ! "$BIN" --ledger "$DIR" log --json | grep -q '"stage_completed"'; then
    "$BIN" --ledger "$DIR" run --stages 1 --device "$DEVICE"
fi
"$BIN" --ledger "$DIR" verify
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN" --ledger "$DIR" export-checkpoint main@stage0 --hf "$OUT" | tee "$tmp/export"
head=$("$BIN" --ledger "$DIR" branches --json | python3 -c 'import json,sys; print([b["head"] for b in json.load(sys.stdin) if b["name"] == "main"][0])')
# The suites of the plan (validation 20 per cell, test 10, seed 2026): the instances
# pretraining never saw, and the demo's stage-0 suites.
# shellcheck disable=SC2086 # the flags are words
"$BIN" eval --model "$OUT" --suite val $EVAL_VAL | tee "$tmp/val"
# shellcheck disable=SC2086
"$BIN" eval --model "$OUT" --suite test $EVAL_TEST | tee "$tmp/test"
{
    sed '/^## Provenance$/,$d' "$CARD"
    echo
    echo "## Provenance"
    echo
    echo "Made by \`tools/base-model.sh\` from \`$PLAN\` on device \`$DEVICE\`: the ledger"
    echo "run's head (branch \`main\` of \`$DIR\`, stage 0 completed) is"
    echo
    echo "    $head"
    echo
    echo "| file | blake3 |"
    echo "| --- | --- |"
    grep '^blake3 ' "$tmp/export" | while read -r _ h f; do echo "| \`$f\` | $h |"; done
    echo
    echo "## Scores (\`ledger eval --model $OUT\`, greedy; val: \`$EVAL_VAL\`, test: \`$EVAL_TEST\`)"
    echo
    echo '```'
    cat "$tmp/val" "$tmp/test"
    echo '```'
    echo
    echo "## The plan it was made from (\`$PLAN\`)"
    echo
    echo '```toml'
    cat "$PLAN"
    echo '```'
} > "$OUT/README.md"
echo "base-model: $((SECONDS - start)) s; ledger: $DIR; model: $OUT"
