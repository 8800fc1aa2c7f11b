#!/usr/bin/env bash
# The CPU study (ledgers/cpu-study.toml): main runs stage 0 (the shipped base planner's
# evaluation) and stage 1, then every engineer x seed fork runs stages 2-4 from main's
# stage-1 checkpoint, two runs at a time. Resumable: run it again after a stop, it
# continues from the last durable point (`ledger study` skips finished runs).
#   CPU_STUDY_LEDGER  ledger directory (default ledgers/cpu-study)
#   CPU_STUDY_SEEDS   seed replicates (default 5)
#   CPU_STUDY_ENGINEERS  (default fixed,learnability,base,current)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LEDGER_BIN:-target/release/ledger}
DIR=${CPU_STUDY_LEDGER:-ledgers/cpu-study}
SEEDS=${CPU_STUDY_SEEDS:-5}
ENGINEERS=${CPU_STUDY_ENGINEERS:-fixed,learnability,base,current}
start=$SECONDS
[[ -d $DIR ]] || "$BIN" --ledger "$DIR" init --plan ledgers/cpu-study.toml
# Stage 0 and stage 1 on main (a resumed run finishes what is missing).
done_stages=$("$BIN" --ledger "$DIR" export --what branches --branch main | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["completed_stages"])')
if (( done_stages < 2 )); then
    "$BIN" --ledger "$DIR" run --stages $((2 - done_stages))
fi
"$BIN" --ledger "$DIR" study --at stage2 --engineers "$ENGINEERS" --seeds "$SEEDS" --executor local:2
"$BIN" --ledger "$DIR" verify
echo "cpu-study: $((SECONDS - start)) s; ledger $DIR, tables in $DIR/study-at2"
