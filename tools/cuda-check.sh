#!/usr/bin/env bash
# The CUDA path end to end, on a machine with an NVIDIA GPU and a CUDA torch 2.11.0
# (with transformers) in python3. What it ran on an H200 is in ledgers/results/cuda-h200.
#   1. `lm generate --device cuda` of the shipped base planner, its per-token log-probs
#      against transformers on the same GPU (tools/cuda_check.py parity);
#   2. `ledger eval --device cuda` of the base planner (compare with the CPU's);
#   3. the demo with `[train] device = "cuda"` (tools/demo.sh), then `replay --verify`
#      on the GPU: every event hash recomputed;
#   4. a checkpoint of Qwen3-4B's exact shape with random weights
#      (ledgers/models/shapes/qwen3-4b.config.json): generation and parity, then
#      ledgers/paper.toml cut to a smoke size (no thinking, 512 new tokens, 3 items a
#      cell, one stage of 4 GRPO steps, every group kept and an entropy bonus so the
#      LoRA backward pass runs), its `plan check` beside the GPU memory nvidia-smi saw.
# Environment: LEDGER_BIN (default target/release/ledger, under $CARGO_TARGET_DIR when set), CUDA_CHECK_OUT (default
# target/cuda-check), CUDA_CHECK_STEPS (default "1 2 3 4": which of the above to run).
set -uo pipefail
cd "$(dirname "$0")/.."
L=$(realpath "${LEDGER_BIN:-${CARGO_TARGET_DIR:-target}/release/ledger}")
OUT=$(mkdir -p "${CUDA_CHECK_OUT:-target/cuda-check}" && realpath "${CUDA_CHECK_OUT:-target/cuda-check}")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TORCH_LIB=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib")') ||
    { echo "cuda-check: python3 has no torch" >&2; exit 2; }
export LIBTORCH_CUDA_LIB=$TORCH_LIB LD_LIBRARY_PATH=$TORCH_LIB:${LD_LIBRARY_PATH:-}
STEPS=" ${CUDA_CHECK_STEPS:-1 2 3 4} "
step() { [[ $STEPS == *" $1 "* ]] && { echo; echo "== $*"; }; }
# GPU memory in use, sampled every 100 ms into $1 until `unwatch`.
watch_memory() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$1" & WATCH=$!; }
unwatch() { kill "$WATCH"; echo "GPU memory peak (nvidia-smi, MiB): $(sort -n "$1" | tail -1)"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
printf 'Say hello.\n' > "$TMP/hello.txt"

if step 1 generate and parity, the shipped base planner; then
"$L" lm generate --model ledgers/models/mapf-base-indep --prompt-file "$TMP/hello.txt" --device cuda \
    --max-new-tokens 48 --json > "$OUT/generate-base.json" &&
    python3 tools/cuda_check.py parity ledgers/models/mapf-base-indep "$OUT/generate-base.json" | tee "$OUT/parity-base.json"
fi

if step 2 eval on CUDA; then
watch_memory "$OUT/memory-eval.txt"
/usr/bin/time -f "%e s" "$L" eval --model ledgers/models/mapf-base-indep --device cuda --per-cell 20 --json > "$OUT/eval-cuda.json"
unwatch "$OUT/memory-eval.txt"
fi

if step 3 the demo on CUDA, then replay --verify on CUDA; then
sed 's/^\[train\]$/[train]\ndevice = "cuda"/' ledgers/demo.toml > "$TMP/demo-cuda.toml"
grep -q '^device = "cuda"' "$TMP/demo-cuda.toml" || { echo "cuda-check: demo.toml has no [train] table" >&2; exit 2; }
watch_memory "$OUT/memory-demo.txt"
LEDGER_BIN=$L DEMO_PLAN=$TMP/demo-cuda.toml DEMO_LEDGER=$TMP/demo tools/demo.sh > "$OUT/demo.log" 2>&1
echo "demo rc=$?: $(grep '^demo:' "$OUT/demo.log")"
unwatch "$OUT/memory-demo.txt"
"$L" --ledger "$TMP/demo" replay --verify --branch main 2>&1 | tee "$OUT/replay.log"
fi

if step 4 "Qwen3-4B's shape, random weights"; then
python3 tools/cuda_check.py shaped "$TMP/q4b" ledgers/models/shapes/qwen3-4b.config.json ledgers/models/mapf-base-indep
"$L" lm generate --model "$TMP/q4b" --prompt-file "$TMP/hello.txt" --device cuda --max-new-tokens 64 \
    --json > "$OUT/generate-4b.json" &&
    python3 tools/cuda_check.py parity "$TMP/q4b" "$OUT/generate-4b.json" | tee "$OUT/parity-4b.json"
python3 - "$TMP/q4b" "$TMP/paper-4b.toml" <<'PY' || exit 2
import sys
s = open("ledgers/paper.toml").read()
for old, new in [('init = "hf:/models/Qwen3-4B"', f'init = "hf:{sys.argv[1]}"'),
                 ("thinking = true", "thinking = false"),
                 ("max_new_tokens = 8192\nengineer_max_new_tokens = 8192",
                  "max_new_tokens = 512\nengineer_max_new_tokens = 512"),
                 ("validation_per_cell = 150", "validation_per_cell = 3"),
                 ("test_per_cell = 150", "test_per_cell = 3"),
                 ("steps = 500", "steps = 4"), ("instances_per_stage = 8000", "instances_per_stage = 128"),
                 ("checkpoint_every = 50", "checkpoint_every = 2"), ("stages = 3", "stages = 1"),
                 ('zero_variance = "drop"', 'zero_variance = "keep"'),
                 ("entropy_coef = 0.0", "entropy_coef = 0.01")]:
    assert old in s, f"ledgers/paper.toml no longer says {old!r}"
    s = s.replace(old, new)
open(sys.argv[2], "w").write(s)
PY
"$L" plan check "$TMP/paper-4b.toml" --device cuda | tee "$OUT/plan-check-4b.txt"
"$L" --ledger "$TMP/p4b" init --plan "$TMP/paper-4b.toml" > /dev/null
watch_memory "$OUT/memory-4b.txt"
/usr/bin/time -f "%e s wall, %M KB host RSS" "$L" --ledger "$TMP/p4b" run --stages 2 --quiet 2>&1 | tee "$OUT/run-4b.log"
unwatch "$OUT/memory-4b.txt"
"$L" --ledger "$TMP/p4b" export --what steps > "$OUT/steps-4b.jsonl"
fi
echo "cuda-check: results in $OUT"
