#!/usr/bin/env bash
# Build and run every test suite (unit, nvrtc, headers, cli; gpu runs where there is a GPU and
# is skipped - exit 77 - where there is none). Warnings are errors.
# usage: scripts/test.sh [BUILD_DIR] ; SANITIZE=1 builds with ASan+UBSan and runs the CPU suites.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SANITIZE:-0}" = 1 ]; then
  build=${1:-build-asan}
  scripts/setup.sh "$build" --werror -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debug
  suites=(--suite unit --suite nvrtc --suite headers --suite cli --suite remote)
else
  build=${1:-build}
  scripts/setup.sh "$build" --werror
  suites=()
fi
meson test -C "$build" --print-errorlogs --num-processes 2 "${suites[@]}"
