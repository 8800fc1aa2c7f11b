#!/usr/bin/env bash
# `make reader-model`: re-make the shipped readers, ledgers/models/mapf-reader and
# ledgers/models/mapf-reader-v2 (the study's base) and ledgers/models/mapf-reader-v3 (the
# demo's), from
# ledgers/models/mapf-base-indep-v4 by the reading pilot's rounds in order (issue 51;
# ledgers/results/reader-pilot/README.md). Each round's plan starts from the HF
# directory the round before exports, under the name that plan's `lm.init` reads:
#   round 1  ledgers/reader-pilot.toml    -> ledgers/reader-pilot-2400
#   round 2  ledgers/reader-pilot-2.toml  -> ledgers/reader-pilot-2-final
#   round 3  ledgers/reader-pilot-3.toml  -> ledgers/reader-pilot-3-final
#   round 4  ledgers/reader-pilot-4.toml  -> ledgers/reader-pilot-4-final
#   round 6  ledgers/reader-pilot-6.toml  -> ledgers/reader-pilot-6-final, and
#            ledgers/models/mapf-reader (tools/base-model.sh, card ledgers/cards/mapf-reader.md)
#   round 8  ledgers/reader-pilot-8.toml  -> ledgers/models/mapf-reader-v2 (tools/base-model.sh,
#            card ledgers/cards/mapf-reader-v2.md)
#   round 9  ledgers/reader-pilot-9.toml  -> ledgers/reader-pilot-9-final
#   round 10 ledgers/reader-pilot-10.toml -> ledgers/models/mapf-reader-v3 (tools/base-model.sh,
#            card ledgers/cards/mapf-reader-v3.md)
# Resumable at every level: a round whose ledger exists is resumed (`run --stages 1`
# finishes an interrupted stage 0 from its last checkpoint), and a round whose export
# exists is skipped. About 8 hours on one core in all (rounds of 24-95 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
if [[ ! -e ledgers/models/mapf-base-indep-v4/model.safetensors ]]; then
    echo "reader-model: ledgers/models/mapf-base-indep-v4 is missing (it no longer ships);" \
        "run \`make base-model-indep-v3 base-model-indep-v4\` first" >&2
    exit 2
fi
round() { # PLAN LEDGER OUT
    local plan=$1 dir=$2 out=$3
    if [[ -e $out/model.safetensors ]]; then
        echo "reader-model: $out exists, skipping $plan"
        return
    fi
    [[ -e $dir ]] || "$BIN" --ledger "$dir" init --plan "$plan"
    if ! "$BIN" --ledger "$dir" log --json | grep -q '"stage_completed"'; then
        "$BIN" --ledger "$dir" run --stages 1
    fi
    "$BIN" --ledger "$dir" verify
    "$BIN" --ledger "$dir" export-checkpoint main@stage0 --hf "$out"
}
round ledgers/reader-pilot.toml ledgers/reader-pilot ledgers/reader-pilot-2400
round ledgers/reader-pilot-2.toml ledgers/reader-pilot-2 ledgers/reader-pilot-2-final
round ledgers/reader-pilot-3.toml ledgers/reader-pilot-3 ledgers/reader-pilot-3-final
round ledgers/reader-pilot-4.toml ledgers/reader-pilot-4 ledgers/reader-pilot-4-final
round ledgers/reader-pilot-6.toml ledgers/reader-pilot-6 ledgers/reader-pilot-6-final
BASE_LEDGER=ledgers/reader-pilot-6 BASE_PLAN=ledgers/reader-pilot-6.toml \
    BASE_MODEL_OUT=ledgers/models/mapf-reader BASE_CARD=ledgers/cards/mapf-reader.md \
    tools/base-model.sh
BASE_LEDGER=ledgers/reader-pilot-8 BASE_PLAN=ledgers/reader-pilot-8.toml \
    BASE_MODEL_OUT=ledgers/models/mapf-reader-v2 BASE_CARD=ledgers/cards/mapf-reader-v2.md \
    tools/base-model.sh
round ledgers/reader-pilot-9.toml ledgers/reader-pilot-9 ledgers/reader-pilot-9-final
BASE_LEDGER=ledgers/reader-pilot-10 BASE_PLAN=ledgers/reader-pilot-10.toml \
    BASE_MODEL_OUT=ledgers/models/mapf-reader-v3 BASE_CARD=ledgers/cards/mapf-reader-v3.md \
    tools/base-model.sh
