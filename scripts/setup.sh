#!/usr/bin/env bash
# Install kvjit's Debian packages (when missing; libcurl for the remote cache tier, and for the test
# suites nginx (the remote suite's server), procps (pgrep in the cli suite) and pip (for the NVRTC
# wheels the cli suite fetches) unless SETUP_TEST_TOOLS=0), configure and build. Extra meson args
# given for a build dir that exists already are applied to it (meson setup --reconfigure), never
# dropped.
# usage: scripts/setup.sh BUILD_DIR [extra meson setup args...]
# The CUDA toolkit is expected at /usr/local/cuda (override: CUDA_ROOT). SETUP_NO_BUILD=1: configure only.
set -euo pipefail
build=${1:-build}
shift || true
packages=(gcc g++ meson ninja-build pkg-config python3 libcmocka-dev libxxhash-dev libcurl4-openssl-dev)
[ "${SETUP_TEST_TOOLS:-1}" = 0 ] || packages+=(python3-pip nginx procps)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cuda=${CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "setup: no CUDA toolkit at $cuda (set CUDA_ROOT)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dtoolkit="$cuda" "$@"
elif (($#)); then
  meson setup --reconfigure "$build" "$@"
fi
[ "${SETUP_NO_BUILD:-0}" = 1 ] || ninja -C "$build"
