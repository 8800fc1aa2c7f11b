#!/usr/bin/env bash
# The Python peers of `cargo bench --bench trainer`: a venv with torch 2.11.0 (CPU),
# transformers 5.23.0, safetensors and trl 1.16.0 (pinned: the versions the README's
# figures were measured with), under the cache (~/.cache/mapf-ledger/venv-hf).
# Idempotent: an existing venv that imports all four is kept. Prints the venv's python,
# so a bench run is
#
#     HF_PYTHON=$(tools/hf-venv.sh) cargo bench --bench trainer
#
# torch comes from the CPU wheel index; where that host is unreachable, from the torch
# 2.11.0 wheel in ~/.cache/mapf-ledger/wheels/ (or PyPI's): the CUDA build, which runs on
# the CPU too once its CUDA libraries are installed beside it.
set -euo pipefail
cache="${MAPF_LEDGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mapf-ledger}"
venv="$cache/venv-hf"
py="$venv/bin/python"
# Pinned: the versions README's Speed and parity figures were measured with.
TRANSFORMERS=5.23.0
TRL=1.16.0
ok() {
    TRANSFORMERS=$TRANSFORMERS TRL=$TRL "$py" - <<'PY' 2>/dev/null
import os, sys, torch, transformers, safetensors, trl
assert torch.__version__.split("+")[0] == "2.11.0", torch.__version__
assert transformers.__version__ == os.environ["TRANSFORMERS"], transformers.__version__
assert trl.__version__ == os.environ["TRL"], trl.__version__
(torch.randn(3) @ torch.randn(3)).item()
PY
}
if [[ -x $py ]] && ok; then
    echo "$py"
    exit 0
fi
command -v python3 >/dev/null || { echo "hf-venv: python3 is needed" >&2; exit 2; }
echo "hf-venv: creating $venv (torch 2.11.0 CPU, transformers, safetensors, trl)" >&2
[[ -x $py ]] || python3 -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
if ! "$py" -c 'import torch' 2>/dev/null; then
    if ! "${pip[@]}" torch==2.11.0 --index-url https://download.pytorch.org/whl/cpu >&2; then
        # PyPI's torch 2.11.0 is the CUDA build: it runs on the CPU, but imports only with
        # its CUDA libraries (about 3 GB of wheels from PyPI) beside it.
        wheel=$(ls "$cache"/wheels/torch-2.11.0-cp3*.whl 2>/dev/null | head -1)
        echo "hf-venv: CPU index unreachable; installing ${wheel:-torch==2.11.0 from PyPI} (CUDA build) with its dependencies" >&2
        "${pip[@]}" "${wheel:-torch==2.11.0}" >&2
    fi
fi
"${pip[@]}" "transformers==$TRANSFORMERS" safetensors "trl==$TRL" >&2
ok || { echo "hf-venv: $venv does not import torch 2.11.0, transformers, safetensors and trl" >&2; exit 2; }
echo "$py"
