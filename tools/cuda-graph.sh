#!/usr/bin/env bash
# Build the CUDA graph shim (tools/cuda-graph/graph.cpp, a C ABI over at::cuda::CUDAGraph)
# and print the library's path on stdout (messages go to stderr). `ledger` loads it from
# $MAPF_CUDA_GRAPH, or from libmapf_cuda_graph.so beside its own binary
# (src/train/lm/graph.rs); without it a graphed decode falls back to the windowed loop
# and says so once.
#
# Where it builds:
#   - on a GPU machine, against python3's CUDA torch 2.11.0 (headers and libraries);
#   - anywhere else, against the headers of the libtorch tools/libtorch.sh assembled and
#     the CUDA runtime's headers from the nvidia-cuda-runtime and nvidia-cuda-crt wheels
#     (downloaded into the same cache); the library then leaves torch's symbols to the
#     process, which has them once `--device cuda` has loaded libtorch_cuda.so.
#   CUDA_GRAPH_NATIVE=1  only the first: fail at once where python3 has no CUDA torch with
#                        the runtime's headers (a GPU machine without network access)
#   CUDA_GRAPH_OUT   where the library goes (default target/cuda-graph)
#   CXX              the C++ compiler (default g++)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'cuda-graph: %s\n' "$*" >&2; }
die() { printf 'cuda-graph: error: %s\n' "$*" >&2; exit 2; }
out=${CUDA_GRAPH_OUT:-target/cuda-graph}
cxx=${CXX:-g++}
command -v "$cxx" >/dev/null || die "no C++ compiler ($cxx); set CXX"
link=()
# python3's torch, when it is a CUDA build: its root, C++ ABI flag and the CUDA runtime
# headers beside it (a toolkit's, or the nvidia wheels' pip installed with torch).
facts=$(python3 - 2>/dev/null <<'PY' || true
import glob, os, torch
root = os.path.dirname(torch.__file__)
if torch.__version__.split("+")[0] == "2.11.0" and os.path.exists(os.path.join(root, "lib", "libtorch_cuda.so")):
    site = os.path.dirname(root)
    cands = [os.path.join(os.environ.get("CUDA_HOME") or "/usr/local/cuda", "include")]
    cands += sorted(glob.glob(os.path.join(site, "nvidia", "*", "include")))
    inc = next((c for c in cands if os.path.exists(os.path.join(c, "cuda_runtime_api.h"))
                and os.path.exists(os.path.join(c, "crt", "host_config.h"))), "")
    if inc:
        print(root, int(torch._C._GLIBCXX_USE_CXX11_ABI), inc)
PY
)
if [[ -n $facts ]]; then
    read -r root abi cuda_inc <<< "$facts"
    link=(-L"$root/lib" -Wl,-rpath,"$root/lib" -ltorch_cuda -lc10_cuda -ltorch_cpu -lc10)
    say "building against python3's CUDA torch at $root"
elif [[ ${CUDA_GRAPH_NATIVE:-} == 1 ]]; then
    die "python3 has no CUDA torch 2.11.0 with the CUDA runtime's headers (CUDA_GRAPH_NATIVE=1)"
else
    root=$(tools/libtorch.sh)
    [[ -n $root && -d $root/include/ATen/cuda ]] || die "no CUDA torch in python3 and no libtorch headers from tools/libtorch.sh"
    abi=1
    cache="${MAPF_LEDGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mapf-ledger}"
    cuda_inc=$cache/cuda-headers/nvidia/cu13/include
    if [[ ! -f $cuda_inc/crt/host_config.h || ! -f $cuda_inc/cuda_runtime_api.h ]]; then
        say "downloading the CUDA runtime headers (nvidia-cuda-runtime, nvidia-cuda-crt) into $cache"
        mkdir -p "$cache/wheels"
        python3 -m pip download --quiet --no-deps --only-binary=:all: nvidia-cuda-runtime nvidia-cuda-crt \
            -d "$cache/wheels" >&2 || die "pip download failed (is the Python package index reachable?)"
        python3 - "$cache" <<'PY'
import glob, os, sys, zipfile
cache = sys.argv[1]
for w in glob.glob(os.path.join(cache, "wheels", "nvidia_cuda_runtime-*.whl")) + glob.glob(os.path.join(cache, "wheels", "nvidia_cuda_crt-*.whl")):
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            if "/include/" in n and not n.endswith("/"):
                z.extract(n, os.path.join(cache, "cuda-headers"))
PY
    fi
    [[ -f $cuda_inc/crt/host_config.h ]] || die "the CUDA runtime headers are not at $cuda_inc"
    say "building against $root's headers; torch's symbols resolve in the process at run time"
fi
mkdir -p "$out"
tmp=$(mktemp "$out/.libmapf_cuda_graph.XXXXXX")
trap 'rm -f "$tmp"' EXIT
"$cxx" -std=c++17 -O2 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI="$abi" \
    -I"$root/include" -I"$root/include/torch/csrc/api/include" -I"$cuda_inc" \
    tools/cuda-graph/graph.cpp -o "$tmp" "${link[@]}" >&2
mv "$tmp" "$out/libmapf_cuda_graph.so"
trap - EXIT
say "built $out/libmapf_cuda_graph.so"
realpath "$out/libmapf_cuda_graph.so"
