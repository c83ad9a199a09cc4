#!/usr/bin/env bash
# Issue 19's prewarm target on a small machine: the README's main prewarm (scripts/main.sh's
# `kvjit prewarm`: Llama-3.1-8B, 18 variants, 50 kernels, -j 2) against the prewarm of one
# single-kernel variant, in the same run, each a whole `kvjit prewarm` process on a cold cache
# dir, alternating for ROUNDS rounds; medians of the wall times and their ratio (target <= 4).
#
# The single-kernel variants: sm_90 has store variants of one kernel only among the quantizing
# ones (a plain copy plans evict-first and PDL trigger differently per batch class), so the
# reference is a bf16 -> fp8 per-tensor store of 1024 B rows (8 B accesses: one plan for every
# class); for an honest bound the ratio is also given against the cheapest single-kernel store
# there is, a plain copy for sm_75 (no PDL, no evict-first: one plan), a lighter kernel.
#
# usage: bench/prewarm_ratio.sh [BUILD_DIR] [ROUNDS]   (quiet the machine first: see `uptime`)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-7}
kvjit="$build/src/kvjit"
[ -x "$kvjit" ] || { echo "prewarm_ratio: no $kvjit (build first)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-prewarm-ratio-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "store_kv_cache arch=90 k_row_bytes=1024 v_row_bytes=1024 index=int64 pdl=auto split=0 vec=8 dtype=bf16 cache_dtype=fp8_e4m3 scale=tensor" >"$tmp/one_fp8.txt"
echo "store_kv_cache arch=75 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=off split=0 vec=16" >"$tmp/one_plain.txt"

# Wall seconds of one cold `kvjit prewarm "$@"`; checks the kernel count it reports.
run() {
  local want=$1
  shift
  local dir="$tmp/cache-$RANDOM$RANDOM"
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$(KVJIT_LOG=0 "$kvjit" prewarm --cache-dir "$dir" "$@" 2>/dev/null)
  t1=$(date +%s.%N)
  rm -rf "$dir"
  [[ $out =~ kernels:\ ([0-9]+)\ compiled ]] || { echo "prewarm_ratio: unexpected output: $out" >&2; exit 1; }
  [[ ${BASH_REMATCH[1]} -eq $want ]] || { echo "prewarm_ratio: $* compiled ${BASH_REMATCH[1]} kernels, not $want" >&2; exit 1; }
  echo "$t0 $t1" | awk '{printf "%.4f\n", $2 - $1}'
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

main=() one_fp8=() one_plain=()
echo "prewarm_ratio: $(nproc) CPUs, $rounds rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < rounds; r++)); do
  main+=("$(run 50 --arch sm_90 -j 2)")
  one_fp8+=("$(run 1 --arch sm_90 -j 2 --manifest "$tmp/one_fp8.txt")")
  one_plain+=("$(run 1 --arch sm_75 -j 2 --manifest "$tmp/one_plain.txt")")
  echo "  round $((r + 1)): main ${main[-1]} s, one fp8 kernel ${one_fp8[-1]} s, one plain kernel ${one_plain[-1]} s"
done
m=$(printf '%s\n' "${main[@]}" | median)
f=$(printf '%s\n' "${one_fp8[@]}" | median)
p=$(printf '%s\n' "${one_plain[@]}" | median)
echo "main prewarm (18 variants, 50 kernels, -j 2):        median $m s"
echo "one single-kernel variant (sm_90, fp8 from bf16):    median $f s"
echo "one single-kernel variant (sm_75, plain copy):       median $p s"
awk -v m="$m" -v f="$f" -v p="$p" 'BEGIN {
  r = m / f; q = m / p;
  printf "ratio main / one sm_90 variant: %.2fx (target <= 4x) %s\n", r, r <= 4 ? "pass" : "MISS";
  printf "ratio main / one sm_75 plain variant: %.2fx (the lighter reference)\n", q;
  printf "csv: main_prewarm,%.4f,s\ncsv: one_variant_sm90,%.4f,s\ncsv: one_variant_sm75_plain,%.4f,s\n", m, f, p;
  printf "csv: ratio_sm90,%.3f,x\ncsv: ratio_sm75_plain,%.3f,x\n", r, q }'
