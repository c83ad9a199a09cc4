#!/usr/bin/env bash
# cli suite (issue 25): a cache prewarmed with one NVRTC and checked with another explains the miss
# by name. Two NVRTC releases come from PyPI as wheels (nvidia-cuda-nvrtc 13.0 and 13.2, the pair
# that installing torch swaps), unpacked once into the build dir and reused by later runs; when pip
# cannot fetch them the test is skipped (exit 77) saying so. No GPU needed.
# Usage: bash tests/test_cli_nvrtc.sh /path/to/kvjit WHEEL_DIR
set -euo pipefail

KVJIT=${1:?usage: test_cli_nvrtc.sh /path/to/kvjit WHEEL_DIR}
WHEELS=${2:?usage: test_cli_nvrtc.sh /path/to/kvjit WHEEL_DIR}
OLD=13.0.88 NEW=13.2.86
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-cli-nvrtc.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset KVJIT_CACHE_PATH KVJIT_MANIFEST KVJIT_CACHE_MAX_SIZE KVJIT_CACHE_DISABLE KVJIT_NVRTC KVJIT_REMOTE_CACHE
export KVJIT_CACHE_DIR="$TMP/cache" KVJIT_LOG=0

skip() {
  echo "SKIP: $*" >&2
  exit 77
}
fail() {
  echo "not ok - $*" >&2
  sed 's/^/#   stdout: /' "$TMP/out" | head -20 >&2
  sed 's/^/#   stderr: /' "$TMP/err" | head -20 >&2
  exit 1
}
kvjit() {
  RC=0
  "$KVJIT" "$@" >"$TMP/out" 2>"$TMP/err" || RC=$?
}
has() { grep -qF -- "$2" "$TMP/$1" || fail "$1 lacks: $2"; }

# The libnvrtc.so of nvidia-cuda-nvrtc==VERSION, fetched and unpacked into $WHEELS/VERSION once.
nvrtc_of() {
  local version=$1 dir="$WHEELS/$1" lib
  lib=$(find "$dir" -name 'libnvrtc.so.*' -path '*/lib/*' 2>/dev/null | sort | head -1)
  if [[ -z $lib ]]; then
    python3 -m pip --version >/dev/null 2>&1 || skip "no pip (python3 -m pip) to fetch the NVRTC wheels"
    rm -rf "$dir.part" && mkdir -p "$dir.part"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir.part" "nvidia-cuda-nvrtc==$version" \
      >"$TMP/pip" 2>&1 || skip "pip cannot fetch nvidia-cuda-nvrtc==$version: $(tail -1 "$TMP/pip")"
    python3 -m zipfile -e "$dir.part"/*.whl "$dir.part/unpacked" || skip "cannot unpack nvidia-cuda-nvrtc==$version"
    rm -rf "$dir" && mv "$dir.part" "$dir"
    lib=$(find "$dir" -name 'libnvrtc.so.*' -path '*/lib/*' | sort | head -1)
    [[ -n $lib ]] || fail "nvidia-cuda-nvrtc==$version holds no libnvrtc.so"
  fi
  echo "$lib"
}

A=$(nvrtc_of $OLD)
B=$(nvrtc_of $NEW)
# libnvrtc dlopens its libnvrtc-builtins.so.X.Y from its own dir ($ORIGIN); under ASan the
# interceptor hides that origin, so a sanitizer build finds the builtins through the loader path.
LD_LIBRARY_PATH="$(dirname "$A"):$(dirname "$B")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
VARIANT=(--arch sm_90 --k-row-bytes 256 --index int64 -j 1)

# kvjit info names the NVRTC in use and why it was chosen.
KVJIT_NVRTC=$A kvjit info
[[ $RC == 0 ]] || fail "info exited $RC"
has out "nvrtc:   13.0"
has out "$A"
has out "chosen: KVJIT_NVRTC"

# A build machine prewarms for 13.0; a server with 13.2 would miss, and says why, by name.
kvjit prewarm --nvrtc "$A" "${VARIANT[@]}"
[[ $RC == 0 ]] || fail "prewarm --nvrtc $A exited $RC"
kvjit cache check --nvrtc "$A" "${VARIANT[@]}"
[[ $RC == 0 ]] || fail "check with the prewarm's NVRTC exited $RC"
has out "0 would miss"
kvjit cache check --nvrtc "$B" "${VARIANT[@]}"
[[ $RC == 1 ]] || fail "check with another NVRTC exited $RC, expected 1"
has out "why (nvrtc): store_kv_cache arch=90 k_row_bytes=256"
has out "cached for NVRTC 13.0, this process uses 13.2 ($B): set KVJIT_NVRTC to an NVRTC 13.0, or prewarm with this one"

# cache ls --json says the same per entry's variant.
KVJIT_NVRTC=$B kvjit cache ls --json
[[ $RC == 0 ]] || fail "ls --json exited $RC"
has out '"miss": "nvrtc", "explanation": "store_kv_cache arch=90 k_row_bytes=256'
has out "cached for NVRTC 13.0, this process uses 13.2"
python3 -c 'import json, sys; rows = json.load(open(sys.argv[1])); assert rows and all(r["miss"] == "nvrtc" for r in rows if r["variant"])' \
  "$TMP/out" || fail "ls --json: not valid JSON, or an entry of the variant that would not miss"

# The build machine keys for the servers' NVRTC: then both hit.
kvjit prewarm --nvrtc "$B" "${VARIANT[@]}"
[[ $RC == 0 ]] || fail "prewarm --nvrtc $B exited $RC"
for lib in "$A" "$B"; do
  kvjit cache check --nvrtc "$lib" "${VARIANT[@]}"
  [[ $RC == 0 ]] || fail "check --nvrtc $lib after prewarming both exited $RC"
done
KVJIT_NVRTC=$B kvjit cache ls --json
has out '"miss": "none"'

# A bad --nvrtc is a usage error naming it.
kvjit cache check --nvrtc "$TMP/no-such-libnvrtc.so" "${VARIANT[@]}"
[[ $RC == 2 ]] || fail "check --nvrtc of a missing file exited $RC, expected 2"
has err "bad value '$TMP/no-such-libnvrtc.so' for --nvrtc"
echo "ok - a cache prewarmed with NVRTC 13.0 and checked with 13.2 names the NVRTC"
