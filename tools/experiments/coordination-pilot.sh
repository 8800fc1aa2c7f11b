#!/usr/bin/env bash
# The coordination pilot (issue 35): does GRPO on 2-agent boards teach the base planner
# coordination, and does the training mix (the engineer's lever) decide how much?
#
# Each arm is one ledger made from ledgers/pilots/cpu-study.toml (its suites: validation 48 per
# size, test 15 per cell, stratified by wait ratio 0.25/0.5/0.75) with the base planner
# $PILOT_BASE, every size's training wait ratio set to the arm's, and the `fixed` engineer:
# stage 0 evaluates the base, stage 1 trains with GRPO and evaluates. Arms run
# $PILOT_JOBS at a time (one torch thread each). Resumable: a finished arm is skipped, a
# stopped one continues from its last durable point.
#
#   tools/experiments/coordination-pilot.sh NAME:WAIT:STEPS:LR:EPOCHS:SEED[:INSTANCES[:SETTINGS]] ...
#   e.g. tools/experiments/coordination-pilot.sh lo:0.0:120:0.0001:1:11 hi:0.75:120:0.0001:1:11
#   EPOCHS is GRPO's updates per sampled batch (mu); INSTANCES the stage's training
#   instances (default the plan's 256; STEPS x 16 uses each instance once). SETTINGS,
#   the levers of issue 53's pilots: SECTION.KEY=VALUE pairs separated by commas, each
#   replacing that key of the plan's [SECTION] or adding it there (e.g.
#   `grpo.kl_coef=0.1,lm.lora_rank=8`); `sizes.KEY=VALUE` sets KEY of every trained size
#   (e.g. `sizes.hole_ratio=0.25`). A list value is written without spaces
#   (`warmup.agents=[1,2,2,3,3,4,4,5,5]`). `size.N.KEY=VALUE` sets KEY of size N alone
#   (e.g. `size.10.data_ratio=0`). `engineer=NAME` runs the arm with engineer NAME
#   instead of `fixed` (it designs stage 1 from stage 0's evidence; not a plan key).
#
#   PILOT_DIR   where the arms' ledgers go (default ledgers/coordination-pilot)
#   PILOT_BASE  the base planner (default ledgers/models/mapf-base-indep)
#   PILOT_PLAN  the plan the arms are made from (default ledgers/pilots/cpu-study.toml)
#   PILOT_JOBS  arms at a time (default 2)
# Prints each arm's coordination rows (stage 0 and stage 1) and writes them to
# $PILOT_DIR/ARM.coordination.json (`ledger compare --json`'s `coordination`).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
DIR=${PILOT_DIR:-ledgers/coordination-pilot}
BASE=${PILOT_BASE:-ledgers/models/mapf-base-indep}
PLAN=${PILOT_PLAN:-ledgers/pilots/cpu-study.toml}
JOBS=${PILOT_JOBS:-2}
[[ $# -gt 0 ]] || { echo "usage: $0 NAME:WAIT:STEPS:LR:EPOCHS:SEED[:INSTANCES] ..." >&2; exit 2; }
mkdir -p "$DIR"

arm() {
    local spec=$1 name wait steps lr epochs seed instances settings engineer=fixed
    IFS=: read -r name wait steps lr epochs seed instances settings <<<"$spec"
    [[ -n $seed ]] || { echo "arm $spec: expected NAME:WAIT:STEPS:LR:EPOCHS:SEED[:INSTANCES[:SETTINGS]]" >&2; return 2; }
    local plan="$DIR/$name.toml" ledger="$DIR/$name"
    sed -e "s|^init = .*|init = \"hf:$BASE\"|" \
        -e "s|^wait_ratio = .*|wait_ratio = $wait|" \
        -e "s|^seed = 11$|seed = $seed|" \
        -e "s|^steps = 120$|steps = $steps|" \
        -e "s|^lr = 0.0001$|lr = $lr|" \
        -e "s|^\[grpo\]$|[grpo]\nepochs = $epochs|" \
        -e "s|^instances_per_stage = .*|instances_per_stage = ${instances:-256}|" \
        "$PLAN" >"$plan.new"
    local kv section key value
    # Split at the commas that begin the next SECTION.KEY=, so a list value keeps its own
    # (`warmup.agents=[1,2,2,3]`).
    local kvs=()
    [[ -n $settings ]] && mapfile -t kvs < <(python3 -c 'import re, sys
for kv in re.split(r",(?=[a-z_]+\.[a-z0-9_.]+=|engineer=)", sys.argv[1]):
    print(kv)' "$settings")
    for kv in "${kvs[@]}"; do
        if [[ $kv =~ ^engineer=([a-z0-9+_-]+)$ ]]; then
            engineer=${BASH_REMATCH[1]}
            continue
        fi
        if [[ $kv =~ ^size\.([0-9]+)\.(data_ratio|hole_ratio|wait_ratio)=(.+)$ ]]; then
            # One size's KEY: the line of that name inside [initial_config.sizes.N].
            local n=${BASH_REMATCH[1]} k=${BASH_REMATCH[2]} v=${BASH_REMATCH[3]}
            grep -q "^\[initial_config.sizes.$n\]$" "$plan.new" ||
                { echo "arm $name: setting $kv: the plan has no size $n" >&2; rm -f "$plan.new"; return 2; }
            awk -v s="[initial_config.sizes.$n]" -v k="$k" -v v="$v" '
                /^\[/ { in_s = ($0 == s) }
                in_s && $0 ~ "^" k " = " { print k " = " v; next }
                { print }' "$plan.new" >"$plan.set" && mv "$plan.set" "$plan.new"
            continue
        fi
        [[ $kv =~ ^([a-z_]+)\.([a-z_]+)=(.+)$ ]] ||
            { echo "arm $name: setting $kv: expected SECTION.KEY=VALUE" >&2; rm -f "$plan.new"; return 2; }
        section=${BASH_REMATCH[1]} key=${BASH_REMATCH[2]} value=${BASH_REMATCH[3]}
        if [[ $section == sizes ]]; then
            # Every trained size's KEY: only the three fields a size has, so the global
            # replacement below cannot reach another section's key of the same name.
            [[ $key =~ ^(data_ratio|hole_ratio|wait_ratio)$ ]] ||
                { echo "arm $name: setting $kv: a size has data_ratio, hole_ratio and wait_ratio" >&2; rm -f "$plan.new"; return 2; }
            sed -i "s|^$key = .*|$key = $value|" "$plan.new"
            continue
        fi
        grep -q "^\[$section\]$" "$plan.new" ||
            { echo "arm $name: the plan has no [$section]" >&2; rm -f "$plan.new"; return 2; }
        # Replace the key inside its section, else add it under the section's header.
        awk -v s="[$section]" -v k="$key" -v v="$value" '
            /^\[/ { if (in_s && !done) { print k " = " v; done = 1 } in_s = ($0 == s) }
            in_s && $0 ~ "^" k " = " { print k " = " v; done = 1; next }
            { print }
            END { if (in_s && !done) print k " = " v }' "$plan.new" >"$plan.set" && mv "$plan.set" "$plan.new"
    done
    if [[ -d $ledger ]]; then
        cmp -s "$plan.new" "$plan" || { echo "arm $name: $ledger exists with another plan" >&2; return 2; }
    else
        mv "$plan.new" "$plan"
        "$BIN" --ledger "$ledger" init --plan "$plan" >/dev/null
    fi
    rm -f "$plan.new"
    local done_stages
    done_stages=$("$BIN" --ledger "$ledger" export --what branches --branch main |
        python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["completed_stages"])')
    if ((done_stages < 2)); then
        "$BIN" --ledger "$ledger" run --stages $((2 - done_stages)) --engineer "$engineer" --quiet \
            >"$ledger.log" 2>&1
    fi
    "$BIN" --ledger "$ledger" compare main --json |
        python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0]["coordination"], indent=1))' \
            >"$DIR/$name.coordination.json"
    # What the stage did, Sum row by Sum row against stage 0 (the transfer lines).
    "$BIN" --ledger "$ledger" compare main >"$DIR/$name.compare.txt"
    "$BIN" --ledger "$ledger" compare main --json |
        python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)[0].get("transfer"), indent=1))' \
            >"$DIR/$name.transfer.json"
}

start=$SECONDS
pids=()
for spec in "$@"; do
    arm "$spec" &
    pids+=($!)
    while (($(jobs -rp | wc -l) >= JOBS)); do sleep 5; done
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
# One line per arm and stage: validation (2 agents) and test (3 agents) on the items
# that need coordination, then on the rest; the baseline beside.
for spec in "$@"; do
    name=${spec%%:*}
    [[ -f $DIR/$name.coordination.json ]] || continue
    python3 - "$DIR/$name.coordination.json" "$name" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
for sc in rows:
    cells = []
    for r in sc["rows"]:
        if r["agents"] > 3:
            continue
        half = "coord" if r["needs_coordination"] else "indep"
        cells.append(f'{r["agents"]}a {half} {r["valid"]}/{r["items"]} ({r["valid_pct"]:.1f}%)')
    print(f'{sys.argv[2]:>12} stage {sc["stage"]} {sc["suite"]:<4} ' + "  ".join(cells))
EOF
done
# The transfer lines of every arm (final stage against stage 0, paired on the same items).
for spec in "$@"; do
    name=${spec%%:*}
    [[ -f $DIR/$name.compare.txt ]] || continue
    sed -n '/^Transfer: /,/^$/p' "$DIR/$name.compare.txt" | sed "s/^main /$(printf '%-4s' "$name") /" | grep -v '^Transfer: ' | grep -v '^$' | grep -v '^branch ' || true
done
echo "coordination-pilot: $((SECONDS - start)) s; ledgers under $DIR"
exit $fail
