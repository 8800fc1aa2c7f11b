#!/usr/bin/env bash
# Provision libtorch 2.11.0 for tch 0.24.0 and print its directory on stdout.
#
# Order of preference:
#   1. $LIBTORCH, when set: used as is (checked for lib/libtorch_cpu.so).
#   2. LIBTORCH_USE_PYTORCH=1: the PyTorch 2.11 installed for python3 (CUDA builds too);
#      nothing is printed on stdout, torch-sys asks python itself.
#   3. Otherwise a CPU-only libtorch assembled from the PyPI wheels into a cache outside
#      the repository ($MAPF_LEDGER_CACHE, default ~/.cache/mapf-ledger), reused when
#      present. The wheel's own libtorch.so pulls in the whole CUDA stack, so it is
#      replaced with a tiny library of the same soname linked against torch_cpu.
#
# Idempotent; every message goes to stderr so callers can capture the path.
set -euo pipefail

TORCH_VERSION=2.11.0
say() { printf 'libtorch: %s\n' "$*" >&2; }
die() { printf 'libtorch: error: %s\n' "$*" >&2; exit 2; }

if [[ -n "${LIBTORCH:-}" ]]; then
    [[ -f "$LIBTORCH/lib/libtorch_cpu.so" ]] \
        || die "LIBTORCH=$LIBTORCH has no lib/libtorch_cpu.so; unset it to let this script assemble one"
    say "using LIBTORCH=$LIBTORCH (set by you)"
    printf '%s\n' "$LIBTORCH"
    exit 0
fi

if [[ "${LIBTORCH_USE_PYTORCH:-}" == 1 ]]; then
    command -v python3 >/dev/null || die "LIBTORCH_USE_PYTORCH=1 but python3 is not on PATH"
    v=$(python3 -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) \
        || die "LIBTORCH_USE_PYTORCH=1 but python3 cannot import torch"
    [[ "$v" == "$TORCH_VERSION" ]] || die "LIBTORCH_USE_PYTORCH=1 but python3 has torch $v; tch 0.24.0 needs $TORCH_VERSION"
    say "using the PyTorch $v installed for python3 (LIBTORCH_USE_PYTORCH=1)"
    exit 0
fi

cache="${MAPF_LEDGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mapf-ledger}"
dest="$cache/libtorch-$TORCH_VERSION-cpu"
if [[ -f "$dest/.complete" ]]; then
    say "reusing $dest"
    printf '%s\n' "$dest"
    exit 0
fi

command -v python3 >/dev/null || die "python3 is needed to download libtorch from the Python package index; install python3 with pip, or set LIBTORCH"
python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip; install pip (python3 -m ensurepip) or set LIBTORCH"
command -v cc >/dev/null || die "a C compiler (cc) is needed to build the libtorch.so shim"

wheels="$cache/wheels"
mkdir -p "$wheels"
if ! ls "$wheels"/torch-$TORCH_VERSION-*.whl >/dev/null 2>&1 \
   || ! ls "$wheels"/nvidia_cuda_runtime-*.whl >/dev/null 2>&1 \
   || ! ls "$wheels"/nvidia_cuda_cupti-*.whl >/dev/null 2>&1; then
    say "downloading torch==$TORCH_VERSION, nvidia-cuda-runtime, nvidia-cuda-cupti into $wheels (about 550 MB)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
        "torch==$TORCH_VERSION" nvidia-cuda-runtime nvidia-cuda-cupti -d "$wheels" >&2 \
        || die "pip download failed (is the Python package index reachable?)"
fi
torch_whl=$(ls "$wheels"/torch-$TORCH_VERSION-*.whl | head -n1)
rt_whl=$(ls "$wheels"/nvidia_cuda_runtime-*.whl | head -n1)
cupti_whl=$(ls "$wheels"/nvidia_cuda_cupti-*.whl | head -n1)

# Assemble in a scratch directory and move it into place at the end, so an interrupted
# run never leaves a half-built libtorch that looks complete.
tmp=$(mktemp -d "$cache/.assemble.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say "unpacking into $dest"
python3 - "$torch_whl" "$rt_whl" "$cupti_whl" "$tmp" <<'PY'
import os, shutil, sys, zipfile
torch_whl, rt_whl, cupti_whl, out = sys.argv[1:]
lib = os.path.join(out, "lib")
os.makedirs(lib, exist_ok=True)
keep_libs = ("libtorch_cpu.so", "libc10.so")
with zipfile.ZipFile(torch_whl) as z:
    for name in z.namelist():
        if name.startswith("torch/include/") and not name.endswith("/"):
            target = os.path.join(out, name[len("torch/"):])
        elif name.startswith("torch/lib/") and (
            os.path.basename(name) in keep_libs or os.path.basename(name).startswith("libgomp")
        ):
            target = os.path.join(lib, os.path.basename(name))
        else:
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
for whl, want in ((rt_whl, "libcudart.so.13"), (cupti_whl, "libcupti.so.13")):
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if os.path.basename(n) == want]
        if not names:
            sys.exit(f"{whl} has no {want}")
        with z.open(names[0]) as src, open(os.path.join(lib, want), "wb") as dst:
            shutil.copyfileobj(src, dst)
PY
# The shim: libtorch.so that only depends on torch_cpu and c10.
printf '/* libtorch.so shim: the CPU pieces live in libtorch_cpu.so */\nint mapf_ledger_libtorch_shim = 1;\n' > "$tmp/shim.c"
cc -shared -fPIC -o "$tmp/lib/libtorch.so" "$tmp/shim.c" -Wl,-soname,libtorch.so \
    -Wl,--no-as-needed -L"$tmp/lib" -ltorch_cpu -lc10 -Wl,-rpath,'$ORIGIN'
rm -f "$tmp/shim.c"
# torch-sys links -lgomp; give the linker an unversioned name for the bundled one.
gomp=$(cd "$tmp/lib" && ls libgomp*.so* 2>/dev/null | head -n1 || true)
[[ -n "$gomp" && ! -e "$tmp/lib/libgomp.so" ]] && ln -s "$gomp" "$tmp/lib/libgomp.so"
printf '%s\n' "$TORCH_VERSION" > "$tmp/build-version"
touch "$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
say "assembled CPU libtorch $TORCH_VERSION in $dest"
printf '%s\n' "$dest"
