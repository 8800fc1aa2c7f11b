#!/usr/bin/env python3
"""Who yields? Read `ledger eval --items` files and say, per agent count, on the items that
need coordination, which agent's plan is longer than its own shortest path (the agent that
made way: a detour, a wait, a step aside), among all plans and among valid ones, and
which pair of agents the first conflict is between, and, of the first conflicts in which
neither agent took extra steps (nobody made way), which was the later-listed agent.

    tools/experiments/yielders.py ITEMS.jsonl[.gz] [ITEMS.jsonl[.gz] ...]

A plan that solves an item that needs coordination must make some agent take extra steps;
this counts whose. Standard library only.
"""
import collections
import gzip
import json
import re
import sys
from collections import deque

STEPS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def shortest(grid, start, goal):
    """Moves of a shortest hole-free path from start to goal (None if there is none)."""
    n = len(grid)
    dist = {tuple(start): 0}
    queue = deque([tuple(start)])
    while queue:
        r, c = queue.popleft()
        if (r, c) == tuple(goal):
            return dist[(r, c)]
        for dr, dc in STEPS.values():
            a, b = r + dr, c + dc
            if 0 <= a < n and 0 <= b < n and grid[a][b] == "F" and (a, b) not in dist:
                dist[(a, b)] = dist[(r, c)] + 1
                queue.append((a, b))
    return None


def extra_steps(item):
    """Per agent (1-based), moves beyond its shortest path, trailing waits not counted;
    None where the plan has no line for it (a parse error)."""
    lines = {}
    for line in item["plan"].splitlines():
        m = re.match(r"agent (\d+):(.*)", line.strip())
        if m:
            lines[int(m.group(1))] = m.group(2).split()
    out = {}
    for i, agent in enumerate(item["instance"]["agents"], start=1):
        moves = lines.get(i)
        if moves is None:
            out[i] = None
            continue
        while moves and moves[-1] == "W":
            moves = moves[:-1]
        d = shortest(item["instance"]["grid"], agent["start"], agent["goal"])
        out[i] = None if d is None else len(moves) - d
    return out


def main(paths):
    for path in paths:
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
            items = [json.loads(line) for line in f if line.strip()]
        print(f"== {path}")
        print("agents  coord items  valid  extra steps, all plans (agent: plans)   "
              "extra steps, valid plans   first conflict (pair: items)   "
              "nobody made way (later agent: items)")
        for k in sorted({it["agents"] for it in items}):
            rows = [it for it in items if it["agents"] == k and it["needs_coordination"]]
            if not rows:
                continue
            every, valid = collections.Counter(), collections.Counter()
            pairs, stuck = collections.Counter(), collections.Counter()
            for it in rows:
                extra_of = extra_steps(it)
                for agent, extra in extra_of.items():
                    if extra and extra > 0:
                        every[agent] += 1
                        if it["valid"]:
                            valid[agent] += 1
                f = it["failure"]
                if f and f["kind"] in ("vertex_conflict", "edge_conflict"):
                    pairs["-".join(map(str, f["agents"]))] += 1
                    first, later = f["agents"]
                    if not (extra_of.get(first) or 0) > 0 and not (extra_of.get(later) or 0) > 0:
                        stuck[later] += 1
            fmt = lambda c: " ".join(f"{a}:{n}" for a, n in sorted(c.items())) or "-"
            print(f"{k:>6}  {len(rows):>11}  {sum(it['valid'] for it in rows):>5}  "
                  f"{fmt(every):<40}  {fmt(valid):<24}  {fmt(pairs):<30}  {fmt(stuck)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
