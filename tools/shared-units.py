#!/usr/bin/env python3
"""Which crates `make test` compiles twice.

`make test` first builds `ledger` without the trainer (`--no-default-features`), then
`cargo test --workspace`. The second build reuses every crate the first compiled only
where the crate, its features, its profile and everything below it are the same. One
differing feature in a low crate (memchr's `default`, cc's `parallel`) compiles again
everything above it, ledger-core included, which cost the 2-core CI about 320 s of CPU.
The root Cargo.toml turns those features on in both builds (its "Not used directly"
dependencies); this script says whether that still holds after a dependency change.

It asks cargo for both unit graphs (`--unit-graph`, which compiles nothing; the flag is
unstable, so the query runs with RUSTC_BOOTSTRAP=1, which reaches no build) and prints
each unit of the test build that the first build compiled differently: same crate, same
target and optimisation, other features or other dependencies. mapf-ledger's own units
differ by design (the `train` feature). Exit 0 when nothing else does, 1 when something
does (naming it), 2 when cargo fails.

Usage: tools/shared-units.py   (from anywhere in the repository)
"""
import functools
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = ["build", "--no-default-features", "--bin", "ledger"]
TEST = ["test", "--workspace", "--no-run"]


def unit_graph(args):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    cmd = [os.environ.get("CARGO", "cargo"), *args, "--unit-graph", "-Z", "unstable-options"]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(f"shared-units: `{' '.join(cmd)}` failed:\n{run.stderr}")
        sys.exit(2)
    return json.loads(run.stdout)["units"]


def own(u):
    """A unit's own fields, as cargo's metadata hash reads them (not the profile's name)."""
    profile = {k: v for k, v in u["profile"].items() if k != "name"}
    return (u["pkg_id"], u["target"]["name"], tuple(u["target"]["kind"]), u["mode"],
            tuple(u["features"]), json.dumps(profile, sort_keys=True), u.get("platform"))


def identities(units):
    @functools.lru_cache(maxsize=None)
    def ident(i):
        deps = tuple(sorted(ident(d["index"]) for d in units[i]["dependencies"]))
        return hash((own(units[i]), deps))
    return [ident(i) for i in range(len(units))]


def slot(u):
    return (u["pkg_id"], u["target"]["name"], u["mode"], u["profile"]["opt_level"])


def name(u):
    return u["pkg_id"].rsplit("#", 1)[-1]


def main():
    core, test = unit_graph(CORE), unit_graph(TEST)
    core_ids = set(identities(core))
    core_slots = {slot(u): u for u in core}
    test_ids = identities(test)
    twice = []
    for u, ident in zip(test, test_ids):
        if ident in core_ids or slot(u) not in core_slots or name(u).startswith("mapf-ledger@"):
            continue
        theirs = core_slots[slot(u)]
        why = ("features " + ",".join(theirs["features"]) + " then " + ",".join(u["features"])
               if theirs["features"] != u["features"] else "a dependency differs")
        twice.append(f"  {name(u)} {u['target']['name']} ({u['mode']}): {why}")
    shared = sum(1 for i in test_ids if i in core_ids)
    print(f"shared-units: the test build reuses {shared} of the first build's {len(core)} units")
    if twice:
        print("shared-units: compiled twice (turn the differing features on in the root "
              "Cargo.toml's \"Not used directly\" dependencies):")
        print("\n".join(sorted(twice)))
        sys.exit(1)


if __name__ == "__main__":
    main()
