# What the cli suites (tests/test_cli.sh, tests/test_cli_newcomer.sh) share: the CLI under test
# (the first argument), a temp dir, an environment that leaks nothing in, helpers, and the runner
# of the test_* functions a suite defines. Sourced, after `set -euo pipefail`.
# shellcheck shell=bash
# shellcheck disable=SC2034 # variables the suites read

KVJIT=${1:?usage: $0 /path/to/kvjit}
[[ -x $KVJIT ]] || { echo "not ok - $KVJIT is not an executable" >&2; exit 1; }
KVJIT=$(cd "$(dirname "$KVJIT")" && pwd)/$(basename "$KVJIT") # cases change directory
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# Nothing from the caller's environment leaks in; nothing lands in ~/.cache.
unset KVJIT_CACHE_PATH KVJIT_MANIFEST KVJIT_CACHE_MAX_SIZE KVJIT_CACHE_DISABLE
export KVJIT_CACHE_DIR="$TMP/env-default"
export KVJIT_LOG=0

# --- helpers (each case runs in a subshell with set -e; fail exits it) -----------------------

fail() {
  echo "#   $*" >&2
  if [[ -s "$TMP/out" ]]; then sed 's/^/#   stdout: /' "$TMP/out" | head -20 >&2; fi
  if [[ -s "$TMP/err" ]]; then sed 's/^/#   stderr: /' "$TMP/err" | head -20 >&2; fi
  exit 1
}

# kvjit ARGS...: runs the CLI, stdout in $TMP/out, stderr in $TMP/err, status in $RC.
kvjit() {
  RC=0
  "$KVJIT" "$@" >"$TMP/out" 2>"$TMP/err" || RC=$?
}

# kvjit, with the "  # cached" / "  # missing ..." marks of --dry-run lines taken off (the cases
# that check the lines themselves; test_fleet_audit_check_export_import checks the marks).
kvjit_n() {
  kvjit "$@"
  sed -i 's/  # [^#]*$//' "$TMP/out"
}

expect_rc() { [[ $RC -eq $1 ]] || fail "exit status $RC, expected $1"; }
expect_out() { grep -Eq -- "$1" "$TMP/out" || fail "stdout lacks /$1/"; }
expect_err() { grep -Eq -- "$1" "$TMP/err" || fail "stderr lacks /$1/"; }

# Cache entry files of a dir (quarantined ones excluded).
entries() { find "$1" -name '*.kvjit' -not -path '*/quarantine/*' -type f 2>/dev/null; }
entry_count() { entries "$1" | wc -l; }
entry_bytes() { entries "$1" | xargs -r stat -c %s | awk '{ s += $1 } END { print s + 0 }'; }

# The numbers of prewarm's summary line:
# "prewarm: N variants: C compiled, A already cached, F failed; kernels: KC compiled, KA already cached; ..."
summary() {
  local line
  line=$(grep -m1 '^prewarm: [0-9]' "$TMP/out") || fail "no summary line"
  [[ $line =~ ^prewarm:\ ([0-9]+)\ variants?:\ ([0-9]+)\ compiled,\ ([0-9]+)\ already\ cached,\ ([0-9]+)\ failed\;\ kernels:\ ([0-9]+)\ compiled,\ ([0-9]+)\ already\ cached ]] ||
    fail "summary line not understood: $line"
  VARIANTS=${BASH_REMATCH[1]} COMPILED=${BASH_REMATCH[2]} CACHED=${BASH_REMATCH[3]} FAILED=${BASH_REMATCH[4]}
  KERNELS_COMPILED=${BASH_REMATCH[5]} KERNELS_CACHED=${BASH_REMATCH[6]}
}

# Variant lines of --dry-run output (the rest are # comments).
dry_run_count() { grep -cv '^#' "$TMP/out" || true; }

no_driver() {
  "$KVJIT" info 2>/dev/null | grep -q '^driver: *none'
}

# --- runner: every test_* function, each in a subshell with set -e --------------------------

run_cases() {
  failures=0
  for name in $(declare -F | awk '{ print $3 }' | grep '^test_'); do
    set +e
    (set -e; "$name")
    status=$?
    set -e
    if [[ $status -eq 0 ]]; then
      echo "ok - ${name#test_}"
    else
      echo "not ok - ${name#test_}"
      failures=$((failures + 1))
    fi
  done
  if ((failures > 0)); then
    echo "# $failures failed"
    exit 1
  fi
  exit 0
}
