#!/usr/bin/env bash
# Main prewarm and one-kernel prewarms, main before issue 19 (159ee6c) against this branch, each a
# whole `kvjit prewarm` process on a cold dir, alternating; wall and user CPU seconds (the CPU time
# is what a loaded machine cannot inflate).
# usage: before_after.sh OLD_KVJIT NEW_KVJIT ROUNDS
set -euo pipefail
old=$1 new=$2 rounds=${3:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "store_kv_cache arch=90 k_row_bytes=1024 v_row_bytes=1024 index=int64 pdl=auto split=0 vec=8 dtype=bf16 cache_dtype=fp8_e4m3 scale=tensor" >"$tmp/fp8.txt"
echo "store_kv_cache arch=75 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=off split=0 vec=16" >"$tmp/plain.txt"
one() { # label kvjit args...
  local label=$1 k=$2
  shift 2
  rm -rf "$tmp/c"
  /usr/bin/time -f "$label: %e s wall, %U s user" "$k" prewarm --cache-dir "$tmp/c" "$@" 2>&1 >/dev/null | grep wall
}
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  for v in before:$old after:$new; do
    one "${v%%:*} main -j 2" "${v#*:}" --arch sm_90 -j 2
    one "${v%%:*} one fp8 kernel" "${v#*:}" --arch sm_90 -j 2 --manifest "$tmp/fp8.txt"
    one "${v%%:*} one plain kernel" "${v#*:}" --arch sm_75 -j 2 --manifest "$tmp/plain.txt"
  done
done
