#!/usr/bin/env bash
# The long chaos run: tests/ledger_chaos.rs with N trials per (file class, damage) pair
# (make test runs 1), printing per class and damage: trials, damage verify detected,
# damage that changed nothing verify reads (free space in sled's file), ledgers
# recover brought back to verifying, ledgers whose genesis was in the damaged bytes,
# and the events and blobs lost (all named by recover's report; the test fails on any
# loss it did not name). Then the class where damage reads as a crash: the last REFS
# record zeroed from inside it to its end, a writer opening the ledger after it, and
# every event reachable before still reachable after (trials, ledgers that kept all).
#
# Usage: tools/chaos.sh [TRIALS] [SEED]   (defaults 20 and 2026)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
seed=${2:-2026}
make --no-print-directory libtorch
CHAOS_TRIALS=$trials CHAOS_SEED=$seed cargo test --test integration \
  -- --nocapture ledger_chaos::damage_to_any_file ledger_chaos::a_last_refs_record 2>&1 |
  grep -E '^(class|[A-Z][a-zA-Z]+ +(Flip|Truncate|ZeroPage|ZeroTail) )|test result|panicked'
