#!/usr/bin/env bash
# A real-size dry run of the paper's setting on this CPU, in bf16 (see
# tools/benches/dry_run.rs): a random model of a published shape through one GRPO
# group's generation, one LoRA GRPO step, an engineer reply, a checkpoint and an export,
# with time and peak resident memory per phase against `train::memory`'s estimate.
#
#   tools/dry-run.sh                       # tiny, 10m and qwen3-0.6b, one process each
#   tools/dry-run.sh qwen3-4b --group 4 --new-tokens 16 --micro-batch 1 --no-export
#
# Each shape runs in its own process so that one's retained heap does not count in the
# next one's peaks. The 0.6B shape needs about 18 GiB and 8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s libtorch
if [[ $# -gt 0 ]]; then
    exec nice cargo bench --bench dry_run -- "$@"
fi
for shape in tiny 10m qwen3-0.6b; do
    nice cargo bench --bench dry_run -- "$shape"
done
