#!/usr/bin/env bash
# The reading pilot's curve (issue 51, item 3): every checkpoint of a ledger's stage 0
# (the warm-up that trains the engineer half) scored by `ledger engineer eval` under
# rules v4 as the `base` engineer, at the plan's text revision and prompt budget:
# grounded %, direction %, parse %, targeting, preserve and acts against the examples
# seen by that step. Checkpoints already scored are skipped (resumable).
#
#   tools/experiments/reader-curve.sh LEDGER PLAN OUT [CONTEXTS]
#   e.g. tools/experiments/reader-curve.sh ledgers/reader-pilot ledgers/reader-pilot.toml \
#          ledgers/results/reader-pilot 200
# Writes OUT/step-N.json (the eval report) and OUT/curve.md (one row per checkpoint).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}
[[ $# -ge 3 ]] || { echo "usage: $0 LEDGER PLAN OUT [CONTEXTS]" >&2; exit 2; }
LEDGER=$1 PLAN=$2 OUT=$3 CONTEXTS=${4:-200}
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# (step, checkpoint event hash) of stage 0, in order.
"$BIN" --ledger "$LEDGER" export --what events |
    python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    c = e["body"].get("checkpoint_saved")
    if c is not None and e["stage"] == 0:
        print(c["step"], e["hash"][:16])' >"$tmp/checkpoints"
while read -r step hash; do
    [[ -s $OUT/step-$step.json ]] && continue
    "$BIN" --ledger "$LEDGER" export-checkpoint "$hash" --hf "$tmp/model-$step" >/dev/null
    "$BIN" --ledger "$LEDGER" engineer eval --engineer base --model "$tmp/model-$step" \
        --plan "$PLAN" --contexts "$CONTEXTS" --json >"$tmp/step-$step.json"
    mv "$tmp/step-$step.json" "$OUT/step-$step.json"
    rm -rf "$tmp/model-$step"
done <"$tmp/checkpoints"
# The plan's engineer examples per engineer step, and how often engineer steps come.
python3 - "$PLAN" "$OUT" <<'PY'
import glob, json, os, re, sys, tomllib
plan = tomllib.load(open(sys.argv[1], "rb"))
w = plan["warmup"]
every, after, batch = w.get("engineer_every", 1), w.get("engineer_after", 0), w["engineer_batch_size"]
rows = []
for f in glob.glob(os.path.join(sys.argv[2], "step-*.json")):
    step = int(re.search(r"step-(\d+)\.json", f).group(1))
    r = json.load(open(f))
    m = r["engineers"][0]["summary"]
    seen = max(0, (step - after) // every) * batch
    claims = [c for row in r["engineers"][0]["rows"] for c in row["claims"]]
    m["claims"] = (sum(c["holds"] for c in claims), len(claims))
    # Claims by the suite size they cite (the benchmark's 20, 48 or 150 items a size, or
    # another total, which never holds): a copied count of three digits is where a
    # reader slips.
    by_total = {}
    for c in claims:
        t = re.match(r"\d+: \d+/(\d+) failed", c["text"])
        if t:
            t = t.group(1) if t.group(1) in ("20", "48", "150") else "other"
            h = by_total.setdefault(t, [0, 0])
            h[0] += c["holds"]
            h[1] += 1
    m["by_total"] = by_total
    # Grounded decisions by how many sizes the reply edits (a second cited line is where
    # round 6's reader slipped), and claims by their place in the reply.
    judged = [row for row in r["engineers"][0]["rows"] if row["grounding_judged"]]
    m["by_edits"] = {k: (sum(row["grounded"] for row in judged if len(row["edited"]) == k),
                         sum(1 for row in judged if len(row["edited"]) == k)) for k in (1, 2)}
    m["by_place"] = {i: (sum(row["claims"][i]["holds"] for row in r["engineers"][0]["rows"] if len(row["claims"]) > i),
                         sum(1 for row in r["engineers"][0]["rows"] if len(row["claims"]) > i)) for i in (0, 1)}
    rows.append((step, seen, m))
fmt = lambda v: "–" if v is None else f"{v:.1f}"
with open(os.path.join(sys.argv[2], "curve.md"), "w") as out:
    out.write(f"Rules: {r['rules']}; {r['sources'][0]}; the base engineer at each checkpoint.\n\n")
    totals = ["20", "48", "150", "other"]
    out.write("| step | examples seen | parse | grounded (n judged) | claims that hold | "
              + "".join(f"of /{t} | " for t in totals)
              + "targeting | preserve | acts | direction | one-edit grounded | two-edit grounded | 1st line holds | 2nd line holds |\n")
    out.write("|---|---|---|---|---|" + "---|" * len(totals) + "---|---|---|---|---|---|---|---|\n")
    for step, seen, m in sorted(rows, key=lambda x: x[0]):
        held, n = m["claims"]
        out.write(f"| {step} | {seen:,} | {fmt(m['parse_pct'])} | {fmt(m['grounded_pct'])} ({m['grounding_contexts']}) "
                  f"| {held}/{n} | "
                  + "".join("{}/{} | ".format(*m["by_total"].get(t, (0, 0))) for t in totals)
                  + f"{fmt(m['targeting_pct'])} | {fmt(m['preserve_pct'])} | {fmt(m['acts_pct'])} | {fmt(m['direction_pct'])} | "
                  + "".join("{}/{} | ".format(*m["by_edits"][k]) for k in (1, 2))
                  + "".join("{}/{} | ".format(*m["by_place"][i]) for i in (0, 1)) + "\n")
print(open(os.path.join(sys.argv[2], "curve.md")).read())
PY
