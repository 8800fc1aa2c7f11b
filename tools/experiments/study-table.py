#!/usr/bin/env python3
"""The per-seed table of a study's results README, from `ledger study`'s study.json.

Each engineer - fixed (and current - base) on the final stage's coordination items,
valid %: one column per seed replicate, then the mean with its 95% t-interval over
seeds and, where the report has it, the pooled paired bootstrap over items.

    python3 tools/experiments/study-table.py ledgers/results/cpu-study-v2-at2/study.json.xz
"""
import json
import sys


def row_of(rows, suite, agents):
    for p in rows:
        if p["suite"] == suite and p["agents"] == agents and p.get("subset") == "coord":
            return p
    return None


def cell(m):
    lo, hi = m["mean"] - (m["ci95"] or 0), m["mean"] + (m["ci95"] or 0)
    bold = m["ci95"] is not None and (lo > 0 or hi < 0)
    text = f"{m['mean']:+.2f} [{lo:+.2f}, {hi:+.2f}]"
    if bold:
        text = f"**{text}**"
    b = m.get("bootstrap_ci95")
    boot = f"[{b['low']:+.2f}, {b['high']:+.2f}]" if b else "–"
    return f"{text}; {boot}"


def main(path):
    r = json.load(open(path))
    rows = r["paired"] + r["orderings"]
    pairs = [(p["engineer"], p["baseline"]) for p in rows]
    pairs = list(dict.fromkeys(pairs))
    seeds = range(r["seeds"])
    head = ["", *(f"val s{s}" for s in seeds), "val mean [t 95%]; boot",
            *(f"test s{s}" for s in seeds), "test mean [t 95%]; boot"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for e, b in pairs:
        mine = [p for p in rows if p["engineer"] == e and p["baseline"] == b]
        out = [f"{e} − {b}"]
        for suite, agents in (("val", 2), ("test", 3)):
            p = row_of(mine, suite, agents)
            if p is None:
                out += ["–"] * (len(seeds) + 1)
                continue
            by_rep = dict(zip(p["replicates"], p["valid"]["per_seed"]))
            out += [f"{by_rep[s]:+.2f}" if s in by_rep else "–" for s in seeds]
            out.append(cell(p["valid"]))
        print("| " + " | ".join(out) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
