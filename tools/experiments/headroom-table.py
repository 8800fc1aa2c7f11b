#!/usr/bin/env python3
"""The headroom table (issue 75 item 1): every arm's final stage against the `fixed` arm,
paired item by item across ledgers.

Each arm is its own ledger (one plan each: the same suites, another training
configuration), so `ledger compare` cannot pair them; `ledger export --what outcomes`
writes every suite item's outcome with its suite's hash and coordination flag, and the
items pair by (suite hash, item). Rates are valid %; a Sum row is the mean over sizes of
the per-size rate (the paper's Sum). Intervals: 95% paired bootstrap over items,
resampled within each size (a Sum row) or over the items themselves (a half), 4,000
resamples, seeded, so the table is reproducible.

    tools/experiments/headroom-table.py DIR BASELINE ARM... > table.md

DIR holds one ledger per arm (DIR/ARM), or the outcomes headroom.sh kept of it
(DIR/ARM.outcomes.jsonl.xz, so ledgers/results/headroom/sSEED pairs without the
ledgers); BASELINE is the `fixed` arm. The best arm by
the validation Sum is named, and its gain over the baseline on test beside it: the
headroom (chosen on validation, confirmed on test).
"""
import json
import lzma
import os
import random
import subprocess
import sys

LEDGER = os.environ.get("LEDGER_BIN", "target/release/ledger")
RESAMPLES = 4000


def outcomes(ledger):
    """{(suite hash, item): row} of the branch main's last evaluated stage: from the
    ledger when it is there, else from its kept outcomes."""
    if os.path.isdir(ledger):
        out = subprocess.run(
            [LEDGER, "--ledger", ledger, "export", "--what", "outcomes", "--branch", "main"],
            check=True, capture_output=True, text=True).stdout
    elif os.path.isfile(ledger + ".outcomes.jsonl.xz"):
        with lzma.open(ledger + ".outcomes.jsonl.xz", "rt") as f:
            out = f.read()
    else:
        sys.exit(f"{ledger}: neither a ledger nor {ledger}.outcomes.jsonl.xz")
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    if not rows:
        sys.exit(f"{ledger}: no outcomes (is its stage 1 complete?)")
    last = max(r["stage"] for r in rows)
    # An item is its suite's hash and its place there: the same item in every ledger
    # whose suites are the same (and no pair where they are not).
    return {(r["suite_hash"], r["item"]): r for r in rows if r["stage"] == last}, last


def paired(base, arm, keys, stratified, rng):
    """(baseline %, arm %, Δ, low, high) on `keys`, Sum over sizes when `stratified`."""
    def rate(rows):
        return 100.0 * sum(r["valid"] for r in rows) / len(rows)

    if stratified:
        sizes = {}
        for k in keys:
            sizes.setdefault(base[k]["size"], []).append(k)
        cells = list(sizes.values())

        def stat(sample):
            a = sum(rate([base[k] for k in c]) for c in sample) / len(sample)
            b = sum(rate([arm[k] for k in c]) for c in sample) / len(sample)
            return a, b
        a, b = stat(cells)
        deltas = []
        for _ in range(RESAMPLES):
            sample = [[c[rng.randrange(len(c))] for _ in c] for c in cells]
            x, y = stat(sample)
            deltas.append(y - x)
    else:
        a, b = rate([base[k] for k in keys]), rate([arm[k] for k in keys])
        d = [int(arm[k]["valid"]) - int(base[k]["valid"]) for k in keys]
        n = len(d)
        deltas = []
        for _ in range(RESAMPLES):
            deltas.append(100.0 * sum(d[rng.randrange(n)] for _ in range(n)) / n)
    deltas.sort()
    lo, hi = deltas[int(0.025 * RESAMPLES)], deltas[int(0.975 * RESAMPLES) - 1]
    return a, b, b - a, lo, hi


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    root, baseline, arms = sys.argv[1], sys.argv[2], sys.argv[3:]
    base, base_stage = outcomes(os.path.join(root, baseline))
    rows = [
        ("val 2a Sum", lambda r: r["suite"] == "val" and r["agents"] == 2, True),
        ("val 2a coord", lambda r: r["suite"] == "val" and r["agents"] == 2 and r["needs_coordination"], False),
        ("val 2a indep", lambda r: r["suite"] == "val" and r["agents"] == 2 and not r["needs_coordination"], False),
        ("test 3a Sum", lambda r: r["suite"] == "test" and r["agents"] == 3, True),
        ("test 4a Sum", lambda r: r["suite"] == "test" and r["agents"] == 4, True),
        ("test 5a Sum", lambda r: r["suite"] == "test" and r["agents"] == 5, True),
    ]
    print(f"Each arm's stage {base_stage} against `{baseline}` (valid %, Δ points with its paired "
          f"95% bootstrap interval, {RESAMPLES:,} resamples). Items: "
          + ", ".join(f"{name} {sum(1 for r in base.values() if f(r))}" for name, f, _ in rows) + ".\n")
    print("| arm | " + " | ".join(name for name, _, _ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    line = [f"{paired(base, base, [k for k, r in base.items() if f(r)], s, random.Random(0))[0]:.1f}"
            for _, f, s in rows]
    print(f"| `{baseline}` (fixed) | " + " | ".join(line) + " |")
    gains = {}
    for arm in arms:
        other, stage = outcomes(os.path.join(root, arm))
        line = []
        for name, f, strat in rows:
            keys = [k for k, r in base.items() if f(r) and k in other]
            rng = random.Random(f"{arm}:{name}")
            a, b, d, lo, hi = paired(base, other, keys, strat, rng)
            gains.setdefault(arm, {})[name] = (d, lo, hi)
            line.append(f"{b:.1f} ({d:+.1f} [{lo:+.1f}, {hi:+.1f}])")
        print(f"| `{arm}` | " + " | ".join(line) + " |")
    if gains:
        best = max(gains, key=lambda a: gains[a]["val 2a Sum"][0])
        v, t = gains[best]["val 2a Sum"], gains[best]["test 3a Sum"]
        c = gains[best]["val 2a coord"]
        print(f"\nBest arm by the validation Sum: `{best}`: {v[0]:+.1f} [{v[1]:+.1f}, {v[2]:+.1f}] on "
              f"validation ({c[0]:+.1f} [{c[1]:+.1f}, {c[2]:+.1f}] on its coordination items), "
              f"{t[0]:+.1f} [{t[1]:+.1f}, {t[2]:+.1f}] on the 3-agent test Sum.")


if __name__ == "__main__":
    main()
