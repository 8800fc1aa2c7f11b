#!/usr/bin/env bash
# Print the path of a headless-capable Chromium, installing Debian's `chromium` package
# when none is found (the report's browser test, tests/report.rs, drives it).
# Idempotent: does nothing when $CHROMIUM or a chromium on PATH already exists.
set -euo pipefail

find_chromium() {
  if [[ -n "${CHROMIUM:-}" && -x "${CHROMIUM}" ]]; then echo "$CHROMIUM"; return 0; fi
  for name in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}

if find_chromium; then exit 0; fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "tools/chromium.sh: no Chromium found and no apt-get to install it; install Chromium and set \$CHROMIUM" >&2
  exit 1
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "tools/chromium.sh: installing Debian's chromium package (once)" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2 || true
$sudo apt-get install -y -qq chromium >&2
find_chromium
