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
BIN=${LEDGER_BIN:-target/release/ledger}
DIR=${BASE_LEDGER:-ledgers/base-run}
PLAN=${BASE_PLAN:-ledgers/base.toml}
OUT=${BASE_MODEL_OUT:-ledgers/models/mapf-base}
start=$SECONDS
if [[ ! -e "$DIR" ]]; then
    "$BIN" --ledger "$DIR" init --plan "$PLAN"
else
    echo "resuming $DIR"
fi
# Stage 0 only (the plan's later stages are not part of the base model): `run --stages 1`
# finishes an interrupted stage 0, and is skipped once stage 0 is complete.
if ! "$BIN" --ledger "$DIR" log --json | grep -q '"stage_completed"'; then
    "$BIN" --ledger "$DIR" run --stages 1
fi
"$BIN" --ledger "$DIR" verify
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN" --ledger "$DIR" export-checkpoint main@stage0 --hf "$OUT" | tee "$tmp/export"
head=$("$BIN" --ledger "$DIR" branches --json | python3 -c 'import json,sys; print([b["head"] for b in json.load(sys.stdin) if b["name"] == "main"][0])')
# The suites of the plan (validation 20 per cell, test 10, seed 2026): the instances
# pretraining never saw, and the demo's stage-0 suites.
"$BIN" eval --model "$OUT" --suite val --per-cell 20 | tee "$tmp/val"
"$BIN" eval --model "$OUT" --suite test --per-cell 10 | tee "$tmp/test"
{
    cat tools/base-model-card.md
    echo
    echo "## Provenance"
    echo
    echo "Made by \`make base-model\` (\`tools/base-model.sh\`) from \`ledgers/base.toml\`: the ledger"
    echo "run's head (branch \`main\` of \`ledgers/base-run\`, stage 0 completed) is"
    echo
    echo "    $head"
    echo
    echo "| file | blake3 |"
    echo "| --- | --- |"
    grep '^blake3 ' "$tmp/export" | while read -r _ h f; do echo "| \`$f\` | $h |"; done
    echo
    echo "## Scores (\`ledger eval --model ledgers/models/mapf-base\`, greedy)"
    echo
    echo '```'
    cat "$tmp/val" "$tmp/test"
    echo '```'
    echo
    echo "## The plan it was made from (\`ledgers/base.toml\`)"
    echo
    echo '```toml'
    cat "$PLAN"
    echo '```'
} > "$OUT/README.md"
echo "base-model: $((SECONDS - start)) s; ledger: $DIR; model: $OUT"
