#!/usr/bin/env bash
# The check harness's quick mode under compute-sanitizer's memcheck (gpu suite).
# usage: memcheck.sh CHECK_GPU [TOOLKIT_DIR]
# Exit 77 (meson: SKIP) without a GPU, without compute-sanitizer, or where the machine refuses
# the tool (its own "Error:" lines, no harness output), saying which; 1 when memcheck reports an
# error or a case fails.
set -uo pipefail
check=$1
toolkit=${2:-/usr/local/cuda}
sanitizer=$(command -v compute-sanitizer || true)
[ -n "$sanitizer" ] || [ ! -x "$toolkit/bin/compute-sanitizer" ] || sanitizer=$toolkit/bin/compute-sanitizer
[ -n "$sanitizer" ] || [ ! -x "$toolkit/compute-sanitizer/compute-sanitizer" ] ||
  sanitizer=$toolkit/compute-sanitizer/compute-sanitizer
"$check" --count >/dev/null || exit 1
# No GPU: the harness says so and exits 77 before the sanitizer is worth starting.
"$check" --op transfer_kv --case 0 >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIP: no CUDA driver or device"
  exit 77
fi
if [ -z "$sanitizer" ]; then
  echo "SKIP: compute-sanitizer not found (PATH, $toolkit/bin)"
  exit 77
fi
log=$(mktemp /tmp/kvjit-memcheck-XXXXXX)
trap 'rm -f "$log"' EXIT
KVJIT_TEST_QUICK=1 "$sanitizer" --tool memcheck --error-exitcode 99 --print-limit 20 "$check" --quick 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
summary=$(grep -E "ERROR SUMMARY" "$log" | tail -1)
if [ "$rc" -eq 0 ]; then
  echo "memcheck: ${summary:-no summary line}"
  exit 0
fi
if grep -q "Device not supported" "$log" || { ! grep -q "^check_gpu:" "$log" && grep -q "========= Error" "$log"; }; then
  echo "SKIP: compute-sanitizer was refused on this machine: $(grep -m1 -E 'Device not supported|========= Error' "$log")"
  exit 77
fi
echo "memcheck failed (exit $rc): ${summary:-no summary line}"
exit 1
