#!/usr/bin/env bash
# Build the libFuzzer harnesses (clang, ASan+UBSan, coverage over the whole library) and run each
# for a bounded time; they are the meson suite "fuzz" of their own build dir.
# usage: tests/fuzz/run.sh [BUILD_DIR] [SECONDS]   (defaults: build-fuzz, 30)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
export FUZZ_SECONDS=${2:-${FUZZ_SECONDS:-30}}
packages=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fuzz: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
clang=$(command -v clang-14 || command -v clang)
# The rest of the toolchain (meson, cmocka, the CUDA toolkit) is scripts/setup.sh's.
if [ ! -f "$build/build.ninja" ]; then
  CC=$clang meson setup "$build" -Dtoolkit="${CUDA_ROOT:-/usr/local/cuda}" --buildtype=debug \
    -Db_sanitize=address,undefined -Db_lundef=false \
    "-Dc_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=all" >/dev/null
fi
ninja -C "$build" tests/fuzz_entry tests/fuzz_store_args tests/fuzz_ops tests/fuzz_manifest tests/fuzz_pack >/dev/null
meson test -C "$build" --no-rebuild --suite fuzz --print-errorlogs --verbose
