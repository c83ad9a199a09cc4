#!/usr/bin/env bash
# Install kvjit's Debian packages (when missing; libcurl for the remote cache tier, nginx for its
# tests, procps for pgrep in the cli suite, pip for the NVRTC wheels the cli suite fetches), configure and build.
# usage: scripts/setup.sh BUILD_DIR [extra meson setup args...]
# The CUDA toolkit is expected at /usr/local/cuda (override: CUDA_ROOT).
set -euo pipefail
build=${1:-build}
shift || true
packages=(gcc g++ meson ninja-build pkg-config python3 python3-pip libcmocka-dev libxxhash-dev libcurl4-openssl-dev nginx procps)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
cuda=${CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "setup: no CUDA toolkit at $cuda (set CUDA_ROOT)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dtoolkit="$cuda" "$@"
fi
ninja -C "$build"
