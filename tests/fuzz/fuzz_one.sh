#!/usr/bin/env bash
# Run one libFuzzer harness for a bounded time over its seed corpus; print the executions.
# usage: fuzz_one.sh FUZZER CORPUS_DIR   (FUZZ_SECONDS, default 30)
# New inputs go to a temp dir, so the checked-in corpus only changes by hand (copy finds over).
set -euo pipefail
fuzzer=$1
seeds=$2
seconds=${FUZZ_SECONDS:-30}
work=$(mktemp -d /tmp/kvjit-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
log="$work/log"
rc=0
( cd "$work" && "$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=20 -rss_limit_mb=4096 \
    -print_final_stats=1 "$work/corpus" "$seeds" ) >"$log" 2>&1 || rc=$?
name=$(basename "$fuzzer")
runs=$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' || true)
if [ "$rc" -ne 0 ]; then
  tail -60 "$log"
  # Keep the crashing input where a developer finds it.
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$f" ] && cp "$f" "/tmp/${name}-$(basename "$f")" && echo "$name: input kept at /tmp/${name}-$(basename "$f")"
  done
  echo "$name: FAILED (exit $rc)"
  exit 1
fi
grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" || true
echo "$name: ${runs:-?} executions in ${seconds} s, $(ls "$work/corpus" | wc -l) new inputs, no crash"
