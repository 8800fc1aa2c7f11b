#!/usr/bin/env bash
# `make demo`: the testbed end to end on the paper's protocol at demo scale.
# Builds the validation and test suites (generated, solved optimally by CBS, hashed),
# prints their instance statistics and scores the independent-shortest-paths baseline
# in the paper's table layout.
set -euo pipefail
cd "$(dirname "$0")/.."
LEDGER_BIN=${LEDGER_BIN:-target/release/ledger}
PER_CELL=${PER_CELL:-40}
echo "== validation suite: 2 agents, sizes 3..10, $PER_CELL instances per size =="
"$LEDGER_BIN" env suite --name val --per-cell "$PER_CELL" --baseline
echo
echo "== test suites: 3 agents x 3..10, 4 agents x 4..10, 5 agents x 5..10, $PER_CELL per cell =="
"$LEDGER_BIN" env suite --name test --per-cell "$PER_CELL" --baseline
