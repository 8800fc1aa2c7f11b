#!/usr/bin/env bash
# The CPU study v2 (ledgers/pilots/cpu-study.toml): main runs stage 0 (the base planner's
# evaluation) and stage 1 (120 GRPO steps), then every engineer x seed fork runs stages
# 2-3 from main's stage-1 checkpoint. Seed replicate by seed replicate: every arm's
# replicate 0 before any replicate 1, so a study stopped part-way leaves whole paired
# replicates, and the tables ($DIR/study-at$AT) are rewritten after each.
# Resumable: run it again after a stop, it continues from the last durable point
# (`ledger study` skips finished runs and resumes a stopped one from its checkpoint).
#   CPU_STUDY_PLAN       the plan (default ledgers/pilots/cpu-study.toml; v3: ledgers/pilots/cpu-study-v3.toml)
#   CPU_STUDY_LEDGER     ledger directory (default ledgers/cpu-study)
#   CPU_STUDY_SEEDS      seed replicates (default 7: 80% power to see 5 points on 3-agent
#                        coordination items, from the coordination pilot's per-seed
#                        spread of paired differences, 3.59 points; study.md's power line)
#   CPU_STUDY_ENGINEERS  (default fixed,heuristic,learnability,base,current)
#   CPU_STUDY_EXECUTOR   (default local:2, two runs at once at one torch thread each)
#   CPU_STUDY_EXTRA      arms run after every seed of the ones above, on as many seeds
#                        (default current+engineer-rl: the trained trainer, issue 36;
#                        empty: none). Its forks train their engineer after each stage's
#                        plan steps with the plan's defaults ([engineer.train]: 4 steps).
#   CPU_STUDY_AT         the stage the arms fork at (default 2: main trains stage 1 and every
#                        arm forks from its checkpoint). 1: main only evaluates the base
#                        (stage 0) and every arm designs and trains stages 1-3 itself, half
#                        again the training per replicate. Only 1 composes across machines:
#                        stage 0 is greedy decoding in the project's own fixed-order Rust
#                        step (the same events on both machines it has run on), while GRPO runs
#                        libtorch's kernels, which round per processor (study v3's main
#                        trained stage 1 to other bits on a second AVX-512 machine, so
#                        `--reuse` of its replicates was refused there). With 1, replicates
#                        from different sessions' machines can be pooled by --reuse, each
#                        replicate's arms paired on the one machine that ran them all.
#   CPU_STUDY_REUSE      an earlier report of this study (study.json): its finished runs
#                        count instead of running again (`ledger study --reuse`), e.g.
#                        ledgers/results/cpu-study-v2-at2/study.json.xz after the worker
#                        ledgers were lost; then the loop starts at the first replicate
#                        the report lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
DIR=${CPU_STUDY_LEDGER:-ledgers/cpu-study}
PLAN=${CPU_STUDY_PLAN:-ledgers/pilots/cpu-study.toml}
SEEDS=${CPU_STUDY_SEEDS:-7}
# The pilot's SD of per-seed paired differences on test 3-agent coordination items
# (ledgers/results/coordination-pilot: wait 0.75 - wait 0 was 10.17 and 15.25 points).
PILOT_SD=3.59
ENGINEERS=${CPU_STUDY_ENGINEERS:-fixed,heuristic,learnability,base,current}
EXECUTOR=${CPU_STUDY_EXECUTOR:-local:2}
EXTRA=${CPU_STUDY_EXTRA-current+engineer-rl}
AT=${CPU_STUDY_AT:-2}
REUSE=()
FIRST=1
if [[ -n ${CPU_STUDY_REUSE:-} ]]; then
    [[ -f $CPU_STUDY_REUSE ]] || { echo "cpu-study: CPU_STUDY_REUSE=$CPU_STUDY_REUSE is not a file" >&2; exit 2; }
    reuse=$CPU_STUDY_REUSE
    # The committed reports are xz-compressed (ledgers/results/*/study.json.xz); `ledger
    # study --reuse` reads plain JSON, so a compressed one is unpacked beside this run
    # and removed when the script ends, however it ends.
    if [[ $reuse == *.xz ]]; then
        reuse=$(mktemp --suffix=.study.json)
        trap 'rm -f "$reuse"' EXIT
        xz -dc "$CPU_STUDY_REUSE" > "$reuse"
    fi
    REUSE=(--reuse "$reuse")
    FIRST=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seeds"] + 1)' "$reuse")
fi
start=$SECONDS
[[ -d $DIR ]] || "$BIN" --ledger "$DIR" init --plan "$PLAN"
# Main's stages before the fork point: stage 0, and stage 1 when AT is 2 (a resumed run
# finishes what is missing).
done_stages=$("$BIN" --ledger "$DIR" export --what branches --branch main | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["completed_stages"])')
if (( done_stages < AT )); then
    "$BIN" --ledger "$DIR" run --stages $((AT - done_stages))
fi
for ((s = FIRST; s <= SEEDS; s++)); do
    echo "== cpu-study: seed replicates 0..$((s - 1)) =="
    "$BIN" --ledger "$DIR" study --at stage$AT --engineers "$ENGINEERS" --seeds "$s" \
        --executor "$EXECUTOR" --power-sd "$PILOT_SD" "${REUSE[@]}"
done
if [[ -n $EXTRA ]]; then
    echo "== cpu-study: the extra arms ($EXTRA) on seed replicates 0..$((SEEDS - 1)) =="
    "$BIN" --ledger "$DIR" study --at stage$AT --engineers "$ENGINEERS,$EXTRA" --seeds "$SEEDS" \
        --executor "$EXECUTOR" --power-sd "$PILOT_SD" "${REUSE[@]}"
fi
"$BIN" --ledger "$DIR" verify
echo "cpu-study: $((SECONDS - start)) s; ledger $DIR, tables in $DIR/study-at$AT"
