#!/usr/bin/env python3
"""The figures of one tools/cuda-bench.sh output folder against issue 78's targets, as
Markdown on stdout (the script writes it to SUMMARY.md beside them). Every figure names
the file it comes from; a part that did not run, or ran past its limit, says so instead
of a figure. Standard library only: it runs on the GPU machine's python3.

    python3 tools/cuda_bench_summary.py OUT_DIR > OUT_DIR/SUMMARY.md
"""
import json
import os
import re
import sys

# Issue 78's targets (one H200; an H100's figures where one is lent).
DECODE_ROOFLINE_B64 = 0.50
DECODE_TOKENS_B1 = 150.0
GRPO_STEP_SECONDS = 12.0
PAPER_MEMORY_WITHIN = 0.10
WARMUP_BUSY = 70.0


def load(out, name):
    """The JSON file `name` of `out`, or None when it is missing or not JSON (a part
    that did not run, or was stopped before it wrote)."""
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def text(out, name):
    try:
        with open(os.path.join(out, name), errors="replace") as f:
            return f.read()
    except OSError:
        return None


def busy(log):
    """'GPU busy N% over the timed steps' and 'memory peak M MiB' of a part's log
    (tools/cuda-bench.sh's `unsample` line), as (N or None, M or None)."""
    if not log:
        return None, None
    b = re.search(r"GPU busy (\d+|nan)% over the timed steps", log)
    m = re.search(r"memory peak (\d+) MiB", log)
    pct = float(b.group(1)) if b and b.group(1) != "nan" else None
    return pct, (int(m.group(1)) if m else None)


def verdict(ok):
    return "n/a" if ok is None else ("**met**" if ok else "not met")


def decode_rows(out, files):
    """(file, loop, batch, tokens/s, step ms, roofline share, tokens equal eager)."""
    rows = []
    for name in files:
        d = load(out, name)
        for f in (d or {}).get("decode", []):
            rows.append((name, f.get("decode_loop", "n/a"), f.get("batch"), f.get("decode_tokens_per_s"),
                         f.get("step_ms"), f.get("roofline_share"), f.get("tokens_equal_eager")))
    return rows


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def main(out):
    lines = []
    say = lines.append
    gpu = (text(out, "gpu.txt") or "gpu: unknown\n").strip().splitlines()
    say(f"# cuda-bench: {gpu[0].removeprefix('gpu: ')}")
    say("")
    say("Written by `tools/cuda_bench_summary.py` from the files beside it "
        f"({'; '.join(gpu[1:]) or 'no commit recorded'}). \"n/a\": the part did not run here, "
        "or stopped before it wrote that figure.")
    say("")

    targets = []
    # 1. Decode (parts 1 and 6).
    decode = decode_rows(out, ["decode-4b.json", "decode-4b-graphed.json", "decode-4b-fixed.json"])
    b64 = [r for r in decode if r[2] == 64 and r[5] is not None]
    b1 = [r for r in decode if r[2] == 1 and r[3] is not None]
    best64 = max(b64, key=lambda r: r[5], default=None)
    best1 = max(b1, key=lambda r: r[3], default=None)
    targets.append(("4B decode at batch 64: >= 50% of the memory roofline",
                    f"{pct(best64[5])} ({best64[1]}, `{best64[0]}`)" if best64 else "n/a",
                    verdict(best64 and best64[5] >= DECODE_ROOFLINE_B64)))
    targets.append(("4B decode at batch 1: >= 150 tokens/s",
                    f"{best1[3]:.0f} tokens/s ({best1[1]}, `{best1[0]}`)" if best1 else "n/a",
                    verdict(best1 and best1[3] >= DECODE_TOKENS_B1)))
    graphed = [r for r in decode if r[0] == "decode-4b-graphed.json"]
    equal = [r[6] for r in graphed if r[6] is not None]
    targets.append(("graph decode equals eager decode",
                    f"{sum(equal)} of {len(equal)} batches equal (`decode-4b-graphed.json`)" if equal
                    else "n/a (no graphs replayed)",
                    verdict(all(equal) if equal else None)))

    # 2. The GRPO step (part 2): the warm as-committed step is `again`, run last.
    grpo = {}
    for v in ["", "-causal", "-fused-norms", "-both", "-again"]:
        d = load(out, f"grpo-4b{v}.json")
        if d and "grpo" in d:
            grpo[f"grpo-4b{v}.json"] = d["grpo"]
    best = min(grpo.items(), key=lambda kv: kv[1]["seconds"], default=None)
    targets.append(("one 4B LoRA GRPO step, 512 new tokens: <= 12 s warm",
                    f"{best[1]['seconds']:.1f} s (`{best[0]}`)" if best else "n/a",
                    verdict(best and best[1]["seconds"] <= GRPO_STEP_SECONDS)))

    # 4. The paper's step (part 5): whether it ran, and its memory against plan check.
    plan = text(out, "paper-plan-check.txt") or ""
    est = {}
    for m in re.finditer(r"^\s+(GRPO generation|GRPO training|KL reference)[^\n]*?([\d.]+) (GiB|MiB)$",
                         plan, re.M):
        est[m.group(1)] = float(m.group(2)) * (1024 if m.group(3) == "GiB" else 1)
    paper_rows = []
    for name, phases in [("at-budget-1", ["GRPO training", "KL reference"]),
                         ("at-budget", ["GRPO training", "KL reference"]),
                         ("step", ["GRPO generation"])]:
        log = text(out, f"grpo-paper-{name}.log")
        if log is None:
            continue
        _, seen = busy(log)
        estimate = max((est[p] for p in phases if p in est), default=None)
        done = "GRPO step" in log
        ratio = seen / estimate if seen and estimate else None
        paper_rows.append((name, done, seen, estimate, ratio))
    ran = [r for r in paper_rows if r[0] == "step"]
    targets.append(("paper.toml's own step runs",
                    ("whole step finished" if ran and ran[0][1] else "stopped at its limit")
                    + " (`grpo-paper-step.log`)" if ran else "n/a (part 5 not run)",
                    verdict(ran[0][1] if ran else None)))
    measured = [r for r in paper_rows if r[4] is not None]
    targets.append(("its peak memory within 10% of plan check's estimate",
                    "; ".join(f"{r[0]}: {r[2] / 1024:.2f} GiB seen / {r[3] / 1024:.2f} GiB estimated = {r[4]:.2f}"
                              for r in measured) or "n/a",
                    verdict(all(abs(r[4] - 1) <= PAPER_MEMORY_WITHIN for r in measured) if measured else None)))

    # 3. The warm-up (part 3): GPU busy over the timed steps, per variant.
    warm = []
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        m = re.fullmatch(r"warmup-(.+)\.json", name)
        if not m:
            continue
        d = load(out, name) or {}
        w = d.get("warmup")
        b, _ = busy(text(out, f"warmup-{m.group(1)}.log"))
        warm.append((m.group(1), w, b))
    best_warm = max((r for r in warm if r[2] is not None), key=lambda r: r[2], default=None)
    targets.append(("warm-up: the GPU busy >= 70% of the step",
                    f"{best_warm[2]:.0f}% (`warmup-{best_warm[0]}`)" if best_warm else "n/a",
                    verdict(best_warm and best_warm[2] >= WARMUP_BUSY)))

    # The CUDA fixture (part 4).
    for name, what in [("fixture-replay.log", "a new CUDA record replays on this GPU"),
                       ("old-fixture-replay.log", "the committed CUDA fixture replays")]:
        t = text(out, name)
        ok = None if t is None else ("every hash matches" in t and "mismatch" not in t)
        said = [l for l in (t or "").splitlines() if "every hash matches" in l or "mismatch" in l
                or "error" in l or "ledger:" in l] or (t or "").strip().splitlines()[-1:]
        targets.append((what, f"`{name}`: " + ("; ".join(said) or "n/a"), verdict(ok)))

    say("## Against issue 78's targets")
    say("")
    say("| target | figure (file) | |")
    say("|---|---|---|")
    for t, f, v in targets:
        say(f"| {t} | {f} | {v} |")
    say("")

    if decode:
        say("## Decode (parts 1 and 6)")
        say("")
        say("| file | loop | batch | tokens/s | ms a step | memory roofline | tokens equal eager |")
        say("|---|---|---:|---:|---:|---:|---|")
        for r in decode_rows(out, ["decode-0.6b.json", "decode-4b.json", "decode-4b-graphed.json",
                                   "decode-4b-fixed.json", "decode-4b-long-graphed.json",
                                   "decode-4b-long-windowed.json"]):
            say(f"| `{r[0]}` | {r[1]} | {r[2]} | {r[3]:.0f} | {r[4]:.2f} | {pct(r[5])} | "
                f"{'n/a' if r[6] is None else r[6]} |")
        say("")
    if grpo:
        say("## The GRPO step (part 2; `again` is the as-committed step run last, warm)")
        say("")
        names = sorted({p["name"] for g in grpo.values() for p in g["timing"]["phases"]})
        say("| file | seconds | MFU | attention | " + " | ".join(names) + " |")
        say("|---|---:|---:|---|" + "---:|" * len(names))
        for f, g in grpo.items():
            secs = {}
            for p in g["timing"]["phases"]:
                secs[p["name"]] = secs.get(p["name"], 0.0) + p["seconds"]
            say(f"| `{f}` | {g['seconds']:.1f} | {pct(g.get('mfu'))} | {g.get('attention_kernel', 'n/a')} | "
                + " | ".join(f"{secs.get(n, 0.0):.2f}" for n in names) + " |")
        say("")
    if warm:
        say("## The warm-up (part 3)")
        say("")
        say("| variant | s a step | GPU busy (timed steps) | attention |")
        say("|---|---:|---:|---|")
        for name, w, b in warm:
            s = f"{w['seconds_per_step']:.3f}" if w else "n/a (stopped)"
            say(f"| `warmup-{name}` | {s} | {'n/a' if b is None else f'{b:.0f}%'} | "
                f"{(w or {}).get('attention_kernel', 'n/a')} |")
        say("")
    if paper_rows:
        say("## paper.toml's step (part 5; memory: nvidia-smi's peak, CUDA context and allocator "
            "cache included, against `paper-plan-check.txt`'s phase line)")
        say("")
        say("| part | finished | memory seen | estimate | seen / estimate |")
        say("|---|---|---:|---:|---:|")
        for name, done, seen, estimate, ratio in paper_rows:
            say(f"| `grpo-paper-{name}` | {'yes' if done else 'no (its limit)'} | "
                f"{'n/a' if seen is None else f'{seen / 1024:.2f} GiB'} | "
                f"{'n/a' if estimate is None else f'{estimate / 1024:.2f} GiB'} | "
                f"{'n/a' if ratio is None else f'{ratio:.2f}'} |")
        say("")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: cuda_bench_summary.py OUT_DIR (a tools/cuda-bench.sh output folder)", file=sys.stderr)
        sys.exit(2)
    if not os.path.isdir(sys.argv[1]):
        print(f"cuda_bench_summary.py: {sys.argv[1]!r} is not a folder (give a tools/cuda-bench.sh output folder)",
              file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
