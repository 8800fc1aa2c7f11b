#!/usr/bin/env bash
# The GPU bench sized for a short lease (issue 50 item 5; issue 78 item 5). A lent GPU
# gives a session 15 minutes of device time, the machine's start included. On one H200
# (cuda-bench-h200 run 1) part 1 with generate() took 2 min 42 s, part 2's three steps
# 78 s and part 3's two warm-ups 21 s; from those, the default parts (1 6 2 3 4) come to
# an estimated 7 minutes and part 5, a second call, to 3-4 (CUDA untested). Every
# figure is written to files. On a machine with an NVIDIA GPU and a CUDA torch 2.11.0
# with transformers in python3 (the device machine's own), with the release `ledger`
# built elsewhere against the CPU libtorch and pointed at that torch's libraries
# (README, "Using a GPU"):
#   1. decode tokens/s of `ledger lm bench` at the Qwen3-0.6B and Qwen3-4B shapes (random
#      bf16 weights), batch 1, 64 and 256, 128 prompt + 128 new tokens, with the share of
#      the memory roofline (CUDA_BENCH_GENERATE=1: beside transformers' generate() (sdpa)
#      on the same prompts and lengths, tools/bench_decode_hf.py);
#   2. one 4B LoRA GRPO step of ledgers/paper.toml's shape (32 prompts x 8 samples,
#      its micro-batches of at most 65,536 tokens, recomputed layers, KL to the base) at
#      512 new tokens, thinking off: its phase split and MFU, GPU utilisation sampled
#      every 200 ms, every row trained (`--grpo-every-row`: paper.toml drops the groups
#      without signal, and random weights give no group signal, so this times drop's
#      worst case, every group with signal); then with each training kernel of issue 78 item 2 (`[lm]
#      training_attention = "causal"`, `training_norms = "fused"`), both, and as is
#      again, on the same machine;
#   3. the base planner's warm-up steps of 64 rows (ledgers/models/mapf-base-indep, the
#      retired mapf-base-indep-v4's shape, on the engineer examples of ledgers/base-indep-v4.toml) with the GPU's utilisation and
#      their phase split and the attention kernel torch picked (warmup-committed.*), then
#      again with cuDNN's attention last (TORCH_CUDNN_SDPA_DEPRIORITIZED), with both
#      training kernels, with them and cuDNN last, with them and cuDNN's
#      TORCH_CUDNN_SDPA_AVOID_RECOMPILE, and the committed plan with cuDNN's cache debug;
#   4. tests/plans/lm-tiny.toml run for 2 stages on the GPU and replayed there
#      (`replay --verify`), bundled as the CUDA fixture's candidate; and the committed
#      fixture (tests/fixtures/lm-tiny-cuda.bundle) replayed too;
#   5. (only when asked: CUDA_BENCH_PARTS=5, a second call) ledgers/paper.toml's GRPO
#      step as committed (`lm bench --grpo-as-committed`: thinking on, 8,192 new
#      tokens; every row trained, its worst case, as in part 2), by parts: one prompt's
#      rows at their whole budget without the decode (`--grpo-at-budget --grpo-prompts
#      1`: its KL reference and training), then the step for as long as its limit
#      allows (its generation), memory peaks beside `plan check`'s estimate;
#   6. (after part 1) decode with the step captured as CUDA graphs (`lm bench
#      --decode-loop graphed`, the shim of tools/cuda-graph.sh, built here or carried
#      beside the binary) at the 4B shape, and the same fixed-shape step run eagerly;
#      each graphed figure says whether its tokens equal the eager step's; then 1,024
#      new tokens at batch 64, graphed against windowed (the key span grows once).
# Last, SUMMARY.md: every figure against issue 78's targets, each naming its file
# (tools/cuda_bench_summary.py; what a results README starts from).
# The tracked tree fits the device tool's 64 MiB transfer as it is (`git ls-files -z |
# xargs -0 du -cb`: 41.0 MiB at deb4577, beside a 6.7 MiB xz of the stripped binary).
# Prepared on the CPU machine (`.carry` listed in .git/info/exclude):
#   mkdir -p .carry && strip -o .carry/ledger target/release/ledger && xz -f .carry/ledger &&
#   cp "$(tools/cuda-graph.sh)" .carry/
# then on the device, with carry [".carry"]:
#   xz -dc .carry/ledger.xz > /tmp/ledger && chmod +x /tmp/ledger && cp .carry/*.so /tmp/ &&
#   LEDGER_BIN=/tmp/ledger CUDA_BENCH_OUT=/tmp/cb CUDA_BENCH_COMMIT=<commit> timeout -k 10 560 tools/cuda-bench.sh;
#   tar -C /tmp -czf "$OUT/cuda-bench.tgz" cb
# (the device tool brings back at most 8 files from $OUT, so the results travel as one
# archive), with a timeout_s of 600 for the default parts; for part 5, CUDA_BENCH_PARTS=5
# and `timeout -k 10 300` under a timeout_s of 330. The inner timeout is what brings the
# figures back: the tool kills a command at its timeout_s, tar included, and every
# figure a part finished is on disk when the inner one stops the script (the parts'
# own limits add up to more than one call, should anything hang).
# Environment: LEDGER_BIN (default target/release/ledger, under $CARGO_TARGET_DIR when set), CUDA_BENCH_OUT (default
# target/cuda-bench), CUDA_BENCH_PARTS (default "1 6 2 3 4"; "5" alone for the paper's
# step), CUDA_BENCH_PAPER_TIMEOUT (the limit of part 5's whole step, default 120 s, after
# its one-prompt part's 200), CUDA_BENCH_PAPER_FULL (1: part 5 also trains the whole batch
# at budget), CUDA_BENCH_GENERATE (1: part 1 also times transformers' generate()),
# CUDA_BENCH_COMMIT (the
# commit the binary was built from; the device copy has no .git).
set -uo pipefail
cd "$(dirname "$0")/.."
L=$(realpath "${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}")
OUT=$(mkdir -p "${CUDA_BENCH_OUT:-target/cuda-bench}" && realpath "${CUDA_BENCH_OUT:-target/cuda-bench}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; [[ -n "${SAMPLER:-}" ]] && kill "$SAMPLER" 2>/dev/null' EXIT
TORCH_LIB=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib")') ||
    { echo "cuda-bench: python3 has no torch" >&2; exit 2; }
export LIBTORCH_CUDA_LIB=$TORCH_LIB LD_LIBRARY_PATH=$TORCH_LIB:${LD_LIBRARY_PATH:-}
PARTS=" ${CUDA_BENCH_PARTS:-1 6 2 3 4} "
part() { [[ $PARTS == *" $1 "* ]] && { echo; echo "== $* ($(date -u +%T))"; }; }
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
echo "gpu: $GPU" | tee "$OUT/gpu.txt"
echo "commit: ${CUDA_BENCH_COMMIT:-unknown}" | tee -a "$OUT/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$OUT/gpu.txt"
# Memory bandwidth (B/s) and dense bf16 peak (FLOP/s) from the GPU's name.
case "$GPU" in
    *H200*) BW=4.8e12 PEAK=989e12 ;;
    *H100*HBM3*|*H100*SXM*) BW=3.35e12 PEAK=989e12 ;;
    *H100*) BW=2.0e12 PEAK=756e12 ;;
    *) BW= PEAK= ;;
esac
FLAGS=()
[[ -n "$BW" ]] && FLAGS+=(--memory-bandwidth "$BW" --peak-flops "$PEAK")
echo "bandwidth ${BW:-unknown} B/s, peak ${PEAK:-unknown} FLOP/s" | tee -a "$OUT/gpu.txt"
# GPU utilisation (%) and memory (MiB) every 200 ms into $1 until `unsample $1 JSON KEY`,
# which prints the mean utilisation over the samples inside JSON's KEY.window_unix_ms
# (the timed steps alone) beside the mean over the whole command and the memory peak.
sample() { nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 200 > "$1" & SAMPLER=$!; }
unsample() {
    kill "$SAMPLER" 2>/dev/null; SAMPLER=
    python3 - "$@" <<'PY'
import json, sys, datetime
samples, path, key = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
for line in open(samples):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        continue
    try:
        t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
        rows.append((t.timestamp() * 1000, float(parts[1]), float(parts[2])))
    except ValueError:
        continue
try:
    lo, hi = json.load(open(path))[key]["window_unix_ms"]
except Exception:
    lo, hi = None, None
inside = [u for t, u, _ in rows if lo is not None and lo <= t <= hi]
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
print(f"GPU busy {mean(inside):.0f}% over the timed steps ({len(inside)} samples), "
      f"{mean([u for _, u, _ in rows]):.0f}% over the command ({len(rows)}); "
      f"memory peak {max([m for *_, m in rows], default=0):.0f} MiB")
PY
}
S06=ledgers/models/shapes/qwen3-0.6b.config.json
S4=ledgers/models/shapes/qwen3-4b.config.json
# Plan $1 with the line(s) $2 added to its [lm] section (the training kernels' variants).
kernels() { sed "s/^\[lm\]\$/[lm]\n$2/" "$1"; }

if part 1 decode, ledger against generate; then
for s in 0.6b 4b; do
    shape=ledgers/models/shapes/qwen3-$s.config.json
    timeout 90 "$L" lm bench --shape "$shape" --device cuda --batch 1,64,256 \
        --prompt-tokens 128 --new-tokens 128 "${FLAGS[@]}" > "$OUT/decode-$s.json" 2> "$OUT/decode-$s.log"
    echo "ledger $s rc=$?"; cat "$OUT/decode-$s.log"
    # transformers' generate() was measured on both GPUs (cuda-bench-h100 run 4,
    # cuda-bench-h200 run 1); it takes a minute or more of a 15-minute lease.
    [[ ${CUDA_BENCH_GENERATE:-0} == 1 ]] || continue
    timeout 150 python3 tools/bench_decode_hf.py "$shape" 1,64,256 128 128 cuda \
        > "$OUT/generate-$s.json" 2> "$OUT/generate-$s.log"
    echo "generate() $s rc=$?"; grep 'generate()' "$OUT/generate-$s.log" || tail -5 "$OUT/generate-$s.log"
done
fi

if part 6 "decode as captured CUDA graphs (--decode-loop graphed) against the fixed-shape step run eagerly"; then
# Issue 78 item 1. The shim: built here against this machine's torch (tools/cuda-graph.sh),
# else the one carried beside the binary. Each graphed figure carries tokens_equal_eager:
# the same lanes from the same step run eagerly.
SHIM=$(CUDA_GRAPH_NATIVE=1 CUDA_GRAPH_OUT="$OUT/cuda-graph" tools/cuda-graph.sh 2> "$OUT/cuda-graph-build.log") ||
    SHIM=$(dirname "$L")/libmapf_cuda_graph.so
[[ -f $SHIM ]] || SHIM=
echo "shim: ${SHIM:-none}" | tee -a "$OUT/cuda-graph-build.log"
for how in graphed fixed; do
    MAPF_CUDA_GRAPH=${SHIM:-/nonexistent} timeout 100 "$L" lm bench --shape "$S4" --device cuda \
        --batch 1,64,256 --prompt-tokens 128 --new-tokens 128 --decode-loop "$how" "${FLAGS[@]}" \
        > "$OUT/decode-4b-$how.json" 2> "$OUT/decode-4b-$how.log"
    echo "ledger 4b $how rc=$?"; cat "$OUT/decode-4b-$how.log"
done
# A longer reply at batch 64 (1,024 new tokens: the step's span grows past 1,024 keys),
# graphed against the windowed loop the trainer runs today.
for how in graphed windowed; do
    MAPF_CUDA_GRAPH=${SHIM:-/nonexistent} timeout 90 "$L" lm bench --shape "$S4" --device cuda \
        --batch 64 --prompt-tokens 128 --new-tokens 1024 --decode-loop "$how" "${FLAGS[@]}" \
        > "$OUT/decode-4b-long-$how.json" 2> "$OUT/decode-4b-long-$how.log"
    echo "ledger 4b long $how rc=$?"; cat "$OUT/decode-4b-long-$how.log"
done
fi

if part 2 one 4B LoRA GRPO step of paper.toml at 512 new tokens; then
sample "$OUT/util-grpo.txt"
timeout 200 "$L" lm bench --shape "$S4" --device cuda --batch --grpo-plan ledgers/paper.toml \
    --grpo-new-tokens 512 --grpo-every-row "${FLAGS[@]}" > "$OUT/grpo-4b.json" 2> "$OUT/grpo-4b.log"
echo "rc=$?"; cat "$OUT/grpo-4b.log"; unsample "$OUT/util-grpo.txt" "$OUT/grpo-4b.json" grpo | tee -a "$OUT/grpo-4b.log"
# The same step with each training kernel (issue 78 item 2), both, then paper.toml again:
# a same-machine comparison (the first call on a machine is slower in every phase; run 8).
# (The adapters' products in f32 against bf16 were measured in cuda-bench-h100/run8.)
kernels ledgers/paper.toml 'training_attention = "causal"' > "$TMP/paper-causal.toml"
kernels ledgers/paper.toml 'training_norms = "fused"' > "$TMP/paper-fused-norms.toml"
kernels ledgers/paper.toml 'training_attention = "causal"\ntraining_norms = "fused"' > "$TMP/paper-both.toml"
for v in causal fused-norms both again; do
    plan=$TMP/paper-$v.toml; [[ $v == again ]] && plan=ledgers/paper.toml
    timeout 100 "$L" lm bench --shape "$S4" --device cuda --batch --grpo-plan "$plan" \
        --grpo-new-tokens 512 --grpo-every-row "${FLAGS[@]}" > "$OUT/grpo-4b-$v.json" 2> "$OUT/grpo-4b-$v.log"
    echo "$v rc=$?"; cat "$OUT/grpo-4b-$v.log"
done
fi

if part 3 the base planner\'s warm-up steps; then
# warmup NAME PLAN [VAR=VALUE ...]: 16 steps of 64 rows of PLAN's engineer examples under
# the environment given, GPU utilisation sampled, into $OUT/warmup-NAME.{json,log}.
warmup() {
    local name=$1 plan=$2; shift 2
    sample "$OUT/util-warmup-$name.txt"
    env "$@" timeout 90 "$L" lm bench --device cuda --batch --warmup-model ledgers/models/mapf-base-indep \
        --warmup-plan "$plan" --warmup-steps 16 --warmup-batch 64 > "$OUT/warmup-$name.json" 2> "$OUT/warmup-$name.log"
    echo "$name rc=$?"; cat "$OUT/warmup-$name.log"
    unsample "$OUT/util-warmup-$name.txt" "$OUT/warmup-$name.json" warmup | tee -a "$OUT/warmup-$name.log"
}
warmup committed ledgers/base-indep-v4.toml
# The suspect of the fixed cost (issue 78 item 3): on sm90 torch 2.11 puts cuDNN's
# attention first, which builds an execution graph for every new shape (batch and length;
# the warm-up's change every step). TORCH_CUDNN_SDPA_DEPRIORITIZED=1 (a string of the
# 2.11 wheel's libtorch_cuda.so) moves it last: flash for causal rows, the memory-efficient
# kernel under a mask. Each figure says the kernel torch picked (attention_kernel).
warmup deprioritized ledgers/base-indep-v4.toml TORCH_CUDNN_SDPA_DEPRIORITIZED=1
# Both training kernels (issue 78 item 2) on the warm-up's forward and backward.
kernels ledgers/base-indep-v4.toml 'training_attention = "causal"\ntraining_norms = "fused"' > "$TMP/warmup-kernels.toml"
warmup kernels "$TMP/warmup-kernels.toml"
warmup kernels-deprioritized "$TMP/warmup-kernels.toml" TORCH_CUDNN_SDPA_DEPRIORITIZED=1
# Keeping cuDNN: TORCH_CUDNN_SDPA_AVOID_RECOMPILE works only without a bias, which the
# causal rows provide; CACHE_DEBUG says what misses. (The allocator's expandable
# segments changed nothing on a warm H200: cuda-bench-h200 run 2.)
warmup kernels-avoid-recompile "$TMP/warmup-kernels.toml" TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1
warmup cache-debug ledgers/base-indep-v4.toml TORCH_CUDNN_SDPA_CACHE_DEBUG=1
echo "cuDNN cache lines: $(grep -ci cache "$OUT/warmup-cache-debug.log")" | tee -a "$OUT/warmup-cache-debug.log"
fi

if part 4 "a CUDA record and its replay"; then
F=$TMP/fixture
"$L" --ledger "$F" init --plan tests/plans/lm-tiny.toml > /dev/null &&
    timeout 150 "$L" --ledger "$F" run --stages 2 --device cuda --quiet > "$OUT/fixture-run.log" 2>&1
echo "run rc=$?"
timeout 100 "$L" --ledger "$F" replay --verify --branch main 2>&1 | tail -3 | tee "$OUT/fixture-replay.log"
"$L" --ledger "$F" bundle --branch main --out "$OUT/lm-tiny-cuda.bundle" > /dev/null && echo "bundled"
O=$TMP/old
"$L" --ledger "$O" init --from-bundle tests/fixtures/lm-tiny-cuda.bundle > /dev/null &&
    timeout 100 "$L" --ledger "$O" replay --verify 2>&1 | tail -3 | tee "$OUT/old-fixture-replay.log"
fi
if part 5 "paper.toml's own GRPO step, as committed (thinking on, 8,192 new tokens)"; then
# Issue 78 item 4, not in the default parts (CUDA_BENCH_PARTS=5, a second call). Random
# weights run every lane to the budget, the worst case. By arithmetic the whole step does
# not fit one call: its generation reads every lane's cache at every step (about 320 s
# at the full memory roofline of an H200, several times that at today's 9-26% of it) and
# it trains 256 rows of 8,418 tokens (about 50 PFLOP). So the step is measured by parts,
# memory peaks (nvidia-smi: CUDA context and allocator cache included) beside plan
# check's estimate for this GPU's memory:
#   a. its KL reference and training on one prompt's 8 rows, each at the whole budget
#      without the decode (`--grpo-at-budget --grpo-prompts 1`): the training phase's
#      peak against plan check's training line, and a 32nd of the step's training;
#   b. the step itself for CUDA_BENCH_PAPER_TIMEOUT seconds (default 120): its first
#      generation wave's peak against plan check's generation line, and how far it gets
#      (each phase's end is written as it happens);
#   c. with CUDA_BENCH_PAPER_FULL=1, the whole batch at budget (256 rows, about 5 min).
GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{printf "%d", $1 / 1024}')
"$L" plan check ledgers/paper.toml --gpu-memory "${GIB}GiB" --model-config "$S4" > "$OUT/paper-plan-check.txt" 2>&1
echo "plan check at ${GIB}GiB rc=$?"; cat "$OUT/paper-plan-check.txt"
# paper NAME LIMIT [FLAG ...]: paper.toml's step as committed, every row trained.
paper() {
    local name=$1 limit=$2; shift 2
    sample "$OUT/util-paper-$name.txt"
    timeout "$limit" "$L" lm bench --shape "$S4" --device cuda --batch --grpo-plan ledgers/paper.toml \
        --grpo-as-committed --grpo-every-row "$@" "${FLAGS[@]}" > "$OUT/grpo-paper-$name.json" 2> "$OUT/grpo-paper-$name.log"
    echo "$name rc=$? (124: past the timeout)"; cat "$OUT/grpo-paper-$name.log"
    unsample "$OUT/util-paper-$name.txt" "$OUT/grpo-paper-$name.json" grpo | tee -a "$OUT/grpo-paper-$name.log"
}
paper at-budget-1 200 --grpo-at-budget --grpo-prompts 1
paper step "${CUDA_BENCH_PAPER_TIMEOUT:-120}"
[[ ${CUDA_BENCH_PAPER_FULL:-0} == 1 ]] && paper at-budget 420 --grpo-at-budget
fi
# Every figure above against issue 78's targets, each naming its file (SUMMARY.md).
python3 tools/cuda_bench_summary.py "$OUT" > "$OUT/SUMMARY.md" && sed -n '/^## Against/,/^$/p' "$OUT/SUMMARY.md"
echo "cuda-bench: results in $OUT"
