#!/usr/bin/env bash
# The headroom pilot (issue 75 item 1): how much can the training configuration alone move
# the outcome of one study-length stage? Every arm starts from the study's policy
# (ledgers/models/mapf-reader-v2, ledgers/cpu-study-reader-v2.toml: 120 GRPO steps of
# 16 instances x 8 plans, 1,920 training instances, KL 0.1) with the `fixed` engineer on
# one configuration; stage 0 evaluates the model, stage 1 trains and evaluates. Two of
# the arms are `fixed` from the two starting configurations (the paper's initial one:
# hole 0.2, wait 0.2 at every size; the study's tuned one: hole 0.1, wait 0.75); the rest
# are the knobs' extremes and random draws (ranges of the `random` engineer: data
# 0.05..1, hole 0..0.3, wait 0..1, drawn by python's random.Random(SEED) so the arm's
# plan is written down in full), and the built-in engineers' own proposals: an arm named
# after an engineer (`heuristic`, `blind`, `random`, `current`) lets that engineer design
# stage 1 from stage 0's evidence, from the paper's start; a `t-` arm starts from the
# tuned configuration instead (`t-wait0`, `t-holes0`, ..., `t-heuristic`, ...), against
# `tuned`.
#
#   tools/experiments/headroom.sh SEED [ARM ...]      (default: every arm, in order)
#
# Ledgers under ledgers/headroom/s$SEED (ignored); the arms' plans, compare tables,
# coordination rows and every suite item's last outcome (ARM.outcomes.jsonl.xz, what
# headroom-table.py pairs, so a later checkout pairs new arms with old ones without
# running them again) under ledgers/results/headroom/s$SEED. Resumable, two arms at a
# time (one torch thread each) unless PILOT_JOBS says otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
seed=${1:?usage: $0 SEED [ARM ...]}
shift
rand() { # rand NAME SEED: a random configuration as size.N.KEY=VALUE settings
    python3 - "$1" "$2" <<'PY'
import random, sys
r = random.Random(f"{sys.argv[1]}:{sys.argv[2]}")
kv = []
for n in range(3, 11):
    kv += [f"size.{n}.data_ratio={round(r.uniform(0.05, 1.0), 3)}",
           f"size.{n}.hole_ratio={round(r.uniform(0.0, 0.3), 3)}",
           f"size.{n}.wait_ratio={round(r.uniform(0.0, 1.0), 3)}"]
print(",".join(kv))
PY
}
zero() { local s=() n; for n in "$@"; do s+=("size.$n.data_ratio=0"); done; (IFS=,; echo "${s[*]}"); }
P=sizes.hole_ratio=0.2 T=sizes.hole_ratio=0.1
declare -A arms=(
    [paper]="0.2::$P"
    [tuned]="0.75::$T"
    [wait75]="0.75::$P"
    [wait0]="0.0::$P"
    [small]="0.2::$P,$(zero 6 7 8 9 10)"
    [large]="0.2::$P,$(zero 3 4 5 6 7)"
    [holes0]="0.2::sizes.hole_ratio=0"
    [holes30]="0.2::sizes.hole_ratio=0.3"
    [rand1]="0.2::$(rand rand1 "$seed")"
    [rand2]="0.2::$(rand rand2 "$seed")"
    [t-wait0]="0.0::$T"
    [t-small]="0.75::$T,$(zero 6 7 8 9 10)"
    [t-large]="0.75::$T,$(zero 3 4 5 6 7)"
    [t-holes0]="0.75::sizes.hole_ratio=0"
    [t-holes30]="0.75::sizes.hole_ratio=0.3"
)
for e in heuristic blind random current; do
    arms[$e]="0.2::engineer=$e,$P"
    arms[t-$e]="0.75::engineer=$e,$T"
done
order=(paper wait75 wait0 small large holes0 holes30 rand1 rand2
    heuristic blind random current
    tuned t-wait0 t-holes0 t-holes30 t-small t-large t-heuristic t-blind t-random t-current)
(($# > 0)) && order=("$@")
specs=()
for a in "${order[@]}"; do
    [[ -n ${arms[$a]:-} ]] || { echo "headroom: no arm $a (arms: ${!arms[*]})" >&2; exit 2; }
    IFS=: read -r wait _ settings <<<"${arms[$a]}"
    specs+=("$a:$wait:120:0.0001:1:$seed:1920:$settings")
done
export PILOT_PLAN=ledgers/cpu-study-reader-v2.toml PILOT_BASE=ledgers/models/mapf-reader-v2
export PILOT_DIR=${HEADROOM_DIR:-ledgers/headroom/s$seed} PILOT_JOBS=${PILOT_JOBS:-2}
out=ledgers/results/headroom/s$seed
mkdir -p "$out"
status=0
echo "== headroom.sh $seed ${order[*]}" >>"$out/pilot.txt"
tools/experiments/coordination-pilot.sh "${specs[@]}" | tee -a "$out/pilot.txt" || status=$?
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
for a in "${order[@]}"; do
    for f in toml coordination.json compare.txt transfer.json; do
        [[ -f $PILOT_DIR/$a.$f ]] && cp "$PILOT_DIR/$a.$f" "$out/"
    done
    # A finished arm's outcomes at its last stage, item by item, keyed by (suite hash,
    # item): about 3 KB compressed (the instance hashes, which the key implies, left out).
    if [[ -f $PILOT_DIR/$a.coordination.json && -d $PILOT_DIR/$a ]]; then
        "$BIN" --ledger "$PILOT_DIR/$a" export --what outcomes --branch main | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
last = max(r["stage"] for r in rows)
for r in rows:
    if r["stage"] == last:
        r.pop("instance"); r.pop("branch")
        print(json.dumps(r, separators=(",", ":"), sort_keys=True))' |
            xz -9 >"$out/$a.outcomes.jsonl.xz.tmp" && mv "$out/$a.outcomes.jsonl.xz.tmp" "$out/$a.outcomes.jsonl.xz"
    fi
done
exit $status
