#!/usr/bin/env bash
# Re-score a shipped model and compare with the scores its model card quotes: the card's
# "## Scores" block must be exactly what `ledger eval` prints today (greedy decoding is
# deterministic, so any difference is a stale card or a changed evaluation). The eval
# arguments come from the card's heading (val: `...`, test: `...`), else each block's
# "(N per cell" header. About 45 s a model on 2 cores with the release binary; not a test.
#   tools/check-model-card.sh [MODEL_DIR ...]   (default: every ledgers/models/*/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
[[ -x $BIN ]] || { echo "build the release binary first (make build)" >&2; exit 2; }
models=("$@")
if ((${#models[@]} == 0)); then
    for r in ledgers/models/*/README.md; do
        grep -q '^## Scores' "$r" && models+=("$(dirname "$r")")
    done
fi
status=0
for m in "${models[@]}"; do
    card=$m/README.md
    heading=$(grep -m1 '^## Scores' "$card") || { echo "$card: no '## Scores' section" >&2; exit 2; }
    quoted=$(python3 - "$card" <<'PY'
import sys
s = open(sys.argv[1]).read()
a = s.index("```\n", s.index("## Scores")) + 4
print(s[a:s.index("```", a)], end="")
PY
)
    args_of() { # suite -> eval args
        local from_heading
        from_heading=$(sed -n "s/.*$1: \`\([^\`]*\)\`.*/\1/p" <<<"$heading")
        if [[ -n $from_heading ]]; then echo "$from_heading"; return; fi
        sed -n "s/^$1 suite (\([0-9]*\) per cell.*/--per-cell \1/p" <<<"$quoted"
    }
    val_args=$(args_of val)
    test_args=$(args_of test)
    # shellcheck disable=SC2086
    got=$("$BIN" eval --model "$m" --suite val $val_args; echo; "$BIN" eval --model "$m" --suite test $test_args)
    if diff <(grep -v '^$' <<<"$quoted") <(grep -v '^$' <<<"$got") >/tmp/card-diff.$$; then
        echo "$m: the card's scores are what ledger eval prints (val: $val_args; test: $test_args)"
    else
        echo "$m: the card's scores differ from ledger eval (< card, > now):"
        cat /tmp/card-diff.$$
        status=1
    fi
    rm -f /tmp/card-diff.$$
done
exit $status
