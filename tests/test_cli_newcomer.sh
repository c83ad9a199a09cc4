#!/usr/bin/env bash
# cli suite, issue 25 (the newcomer's path): scripts/main.sh and scripts/setup.sh as a new user
# runs them, the names people type, suggestions for typos, help that lists what exists, the
# progress bar, pushes in prewarm's summary, and the small messages; exit codes and words.
# Needs NVRTC, no GPU (a driver is hidden with KVJIT_LIBCUDA where "no GPU" is the case).
# Usage: bash tests/test_cli_newcomer.sh /path/to/BUILD/src/kvjit
# Cases are called by name through `declare -F`, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

# shellcheck source=tests/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(dirname "$(dirname "$KVJIT")")
ONE=(--k-row-bytes 256 --index int64)

# --- scripts/main.sh and scripts/setup.sh ----------------------------------------------------

# The README's build-machine example: --arch and no GPU prewarms those archs, checks them and
# exits 0 (it used to read "--arch given" as "GPU present" and exit 77).
test_main_sh_arch_without_gpu() {
  local dir="$TMP/main"
  RC=0
  (cd "$ROOT" && KVJIT_BUILD_DIR="$BUILD" KVJIT_LIBCUDA=/nonexistent/libcuda.so.1 \
    scripts/main.sh --arch sm_90,sm_100 "${ONE[@]}" --cache-dir "$dir") >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 0
  expect_out '^prewarm: 2 variants: 2 compiled'
  expect_out "^prewarm: cache dir $dir\$"
  expect_out '^check: 2 variants, [0-9]+ kernels: [0-9]+ cached locally, 0 on the remote, 0 would miss'
  expect_out '^main: no GPU here: compiled only'
  if grep -q 'GPU present' "$TMP/out"; then fail "main.sh claimed a GPU"; fi
  [[ $(entry_count "$dir") -gt 0 ]] || fail "nothing in $dir"
}

# Extra meson args for a build dir that exists are applied, not dropped (--werror was).
test_setup_sh_applies_args_to_an_existing_dir() {
  local b="$TMP/setup-build" toolkit
  toolkit=$(meson introspect "$BUILD" --buildoptions |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "toolkit"))')
  meson setup "$b" "$ROOT" -Dtoolkit="$toolkit" -Dtests=disabled -Dbench=false >"$TMP/out" 2>&1 ||
    fail "meson setup: $(tail -3 "$TMP/out")"
  RC=0
  (cd "$ROOT" && SETUP_NO_BUILD=1 SETUP_TEST_TOOLS=0 CUDA_ROOT="$toolkit" scripts/setup.sh "$b" --werror) \
    >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 0
  meson introspect "$b" --buildoptions |
    python3 -c 'import json,sys; sys.exit(0 if next(o["value"] for o in json.load(sys.stdin) if o["name"] == "werror") else 1)' ||
    fail "--werror was not applied to the existing build dir"
}

# --- names people type, and typos ------------------------------------------------------------

# Each spelling gives what its canonical one gives.
test_names_people_type() {
  local spelling canonical want
  while IFS='|' read -r spelling canonical; do
    # shellcheck disable=SC2086 # each case's text is flags, split into words
    kvjit prewarm -n --arch sm_90 $canonical
    expect_rc 0
    want=$(grep -v '^#' "$TMP/out" | sed 's/  # .*//')
    # shellcheck disable=SC2086
    kvjit prewarm -n --arch sm_90 $spelling
    [[ $RC -eq 0 ]] || fail "'$spelling': exit $RC: $(cat "$TMP/err")"
    [[ $(grep -v '^#' "$TMP/out" | sed 's/  # .*//') == "$want" ]] || fail "'$spelling' is not '$canonical'"
  done <<'CASES'
--model Llama-3.1-8B|--model llama-3.1-8b
--model meta-llama/Llama-3.1-8B-Instruct|--model llama-3.1-8b
--model Qwen/Qwen2.5-7B-Instruct|--model qwen2.5-7b
--model mistralai/Mistral-7B-Instruct-v0.3|--model mistral-7b
--model google/gemma-2-9b-it|--model gemma-2-9b
--model deepseek-ai/DeepSeek-V3|--model deepseek-v3
--dtype BF16|--dtype bf16
--dtype torch.float8_e4m3fn|--dtype fp8_e4m3
--quantize-from BF16 --dtype fp8|--quantize-from bf16 --dtype fp8
CASES
  local arch
  for arch in h100 H200 gh200 sm_90 90 9.0; do
    kvjit prewarm -n --arch "$arch" "${ONE[@]}"
    [[ $RC -eq 0 ]] || fail "--arch $arch: exit $RC: $(cat "$TMP/err")"
    expect_out '^store_kv_cache arch=90 '
  done
  kvjit prewarm -n --arch b200,a100 "${ONE[@]}"
  expect_rc 0
  expect_out 'arch=100 '
  expect_out 'arch=80 '
}

# A name that is not one: exit 2, one line, the nearest name when there is one, help named once.
test_refusals_suggest_the_nearest() {
  local args want
  while IFS='|' read -r args want; do
    # shellcheck disable=SC2086 # each case's text is flags, split into words
    kvjit prewarm -n --arch sm_90 $args
    [[ $RC -eq 2 ]] || fail "'$args': exit $RC, expected 2"
    [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "'$args': more than one line"
    grep -qF -- "$want" "$TMP/err" || fail "'$args': stderr lacks '$want'"
    [[ $(grep -o -- '--help' "$TMP/err" | wc -l) -eq 1 ]] || fail "'$args': --help named more than once"
  done <<'CASES'
--model llama-3.1-9b|did you mean llama-3.1-8b?
--model Lama-3.1-70B|did you mean llama-3.1-70b?
--model not-a-model|expected one of the presets, or --kv-heads and --head-dim
--dtype bf61|did you mean bf16?
--arch h10|or a GPU name (e.g. h100
CASES
  kvjit --versoin
  expect_rc 2
  expect_err "unknown option '--versoin'; did you mean '--version'\\?"
  kvjit prewam
  expect_rc 2
  expect_err "unknown command 'prewam'; did you mean 'prewarm'\\?"
  kvjit cache lss
  expect_rc 2
  expect_err "unknown command 'lss'; did you mean 'ls'\\?"
  kvjit prewarm --arch sm_90 --modle llama-3.1-8b
  expect_rc 2
  expect_err "unknown option '--modle'; did you mean '--model'\\?"
  kvjit cache ls --jsno
  expect_rc 2
  expect_err "unknown option '--jsno'; did you mean '--json'\\?"
  kvjit prewarm -n --arch sm_90 --op transfer_kb
  expect_rc 2
  expect_err "bad value 'transfer_kb' for --op: did you mean transfer_kv\\?"
  kvjit frobnicate
  expect_rc 2
  if grep -q 'did you mean' "$TMP/err"; then fail "a suggestion for a word near nothing"; fi
}

# Ops build plain sm_XY: sm_90a is refused saying so and naming what to use, with no "expected
# ... sm_90a" that contradicts it.
test_arch_specific_refused_with_the_reason() {
  local arch
  for arch in sm_90a sm_100f compute_90; do
    kvjit prewarm -n --arch "$arch" "${ONE[@]}"
    expect_rc 2
    expect_err "bad value '$arch' for --arch: ops build plain sm_XY cubins \\(sm_[0-9]+ runs on the same GPUs"
    expect_err 'targets of the generic loader'
    if grep -q 'such as sm_90, sm_90a' "$TMP/err"; then fail "the contradictory example is back"; fi
  done
}

# --- help ------------------------------------------------------------------------------------

test_help_lists_what_exists() {
  kvjit --help
  expect_rc 0
  local word
  for word in 'prewarm' 'cache ls' 'cache check' 'cache verify' 'cache export FILE' 'cache import FILE' \
    'cache prune' 'info'; do
    grep -qF "  $word" "$TMP/out" || fail "kvjit --help lacks '$word'"
  done
  if grep -q 'compile store_kv_cache variants' "$TMP/out"; then fail "help says prewarm builds store variants only"; fi
  for word in export import; do
    kvjit cache "$word" --help
    expect_rc 0
    expect_out "^Usage: kvjit cache $word \\[options\\] FILE"
  done
  kvjit cache check --help
  expect_rc 0
  expect_out '--arch LIST'
  expect_out '--cache-dir DIR'
  kvjit prewarm --help
  expect_rc 0
  expect_out 'transfer_kv'
  expect_out 'shares of about equal compile time'
  expect_out 'h100'
}

# --- prewarm's progress and summary ------------------------------------------------------------

# On a terminal the bar is drawn at once and redrawn at least every second (it used to appear
# only when the first share finished).
test_progress_bar_at_once_and_every_second() {
  command -v script >/dev/null || { echo "# script(1) missing: skipped"; return 0; }
  local dir="$TMP/bar"
  script -qec "'$KVJIT' prewarm --arch sm_90,sm_100 --model llama-3.1-8b,gemma-2-9b --cache-dir '$dir' -j 1" \
    /dev/null >"$TMP/tty" 2>&1 || fail "prewarm under script(1): $(tail -3 "$TMP/tty")"
  tr '\r' '\n' <"$TMP/tty" | grep -o 'shares .*  [0-9.]*s$' | grep -o '[0-9.]*s$' | tr -d s >"$TMP/times"
  [[ $(wc -l <"$TMP/times") -ge 2 ]] || fail "fewer than two frames: $(cat -v "$TMP/tty" | head -5)"
  python3 - "$TMP/times" <<'PY' || fail "frames: $(tr '\n' ' ' <"$TMP/times")"
import sys
t = [float(x) for x in open(sys.argv[1])]
assert t[0] < 0.5, f"first frame at {t[0]} s"
gaps = [b - a for a, b in zip(t, t[1:])]
assert max(gaps, default=0) < 2.5, f"a gap of {max(gaps)} s between frames"  # 1 s, and room for a loaded machine
PY
  grep -q '^prewarm: [0-9]* variants: ' "$TMP/tty" || fail "no summary"
}

# One variant is "1 variant"; the summary names the cache dir.
test_summary_words() {
  local dir="$TMP/words"
  kvjit prewarm --arch sm_90 "${ONE[@]}" --cache-dir "$dir" -j 1
  expect_rc 0
  expect_out '^prewarm: 1 variant: 1 compiled'
  expect_out "^prewarm: cache dir $dir\$"
  kvjit cache check --arch sm_90 "${ONE[@]}" --cache-dir "$dir"
  expect_rc 0
  expect_out '^check: 1 variant, '
  kvjit prewarm -n --arch sm_90 "${ONE[@]}" --cache-dir "$dir"
  expect_out '^# kvjit prewarm --dry-run: 1 variant '
}

# A free loopback port nothing listens on.
closed_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# prewarm ROWS into DIR with the remote URL in MODE (ro / rw), with the library's warnings on.
# A build without libcurl has no remote tier (the remote cases then end here, passing).
prewarm_with_remote() {
  if env -u KVJIT_LOG KVJIT_REMOTE_CACHE=http://127.0.0.1:9 "$KVJIT" info 2>&1 | grep -q 'built without libcurl'; then
    echo "# built without libcurl: no remote tier to push to"
    exit 0
  fi
  RC=0
  env -u KVJIT_LOG KVJIT_REMOTE_CACHE="$1" KVJIT_REMOTE_CACHE_MODE="$2" \
    "$KVJIT" prewarm --arch sm_90 --k-row-bytes "$3" --index int64 -j 2 --cache-dir "$4" \
    >"$TMP/out" 2>"$TMP/err" || RC=$?
}

# A read-write remote that cannot take the pushes: exit 1, the pushes in the summary, the
# warning once however many workers saw it. Read-only: the same failures do not fail the run.
test_failed_push_exits_1() {
  local dir="$TMP/push-fail" url
  url="http://127.0.0.1:$(closed_port)"
  prewarm_with_remote "$url" rw 256,512,1024 "$dir"
  expect_rc 1
  expect_out "^prewarm: remote $url \\(read-write\\): 0 entries pushed, [1-9][0-9]* requests? failed or skipped"
  expect_err "pushing to $url failed"
  [[ $(grep -c 'no connection' "$TMP/err") -eq 1 ]] || fail "the warning $(grep -c 'no connection' "$TMP/err") times"
  summary
  [[ $FAILED -eq 0 ]] || fail "the compiles themselves failed"
  prewarm_with_remote "$url" ro 256,512,2048 "$dir"
  expect_rc 0
  expect_out "^prewarm: remote $url \\(read-only\\): "
}

# A read-write remote that takes them: exit 0 and how many were pushed.
test_pushes_counted() {
  local port_file="$TMP/port" pid port
  python3 "$ROOT/tests/remote/fault_server.py" "$port_file" &
  pid=$!
  for _ in $(seq 1 100); do [[ -s $port_file ]] && break; sleep 0.05; done
  port=$(cat "$port_file" 2>/dev/null) || { kill "$pid"; fail "the loopback server did not start"; }
  prewarm_with_remote "http://127.0.0.1:$port/store" rw 256,512 "$TMP/push-ok"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  expect_rc 0
  expect_out '\(read-write\): [1-9][0-9]* entries pushed, 0 requests failed or skipped'
}

# --- the small ones ----------------------------------------------------------------------------

# A bad KVJIT_COMPILE is warned about by the CLI too (which compiles whatever it says), once.
test_bad_compile_mode_warned_once() {
  RC=0
  env -u KVJIT_LOG KVJIT_COMPILE=sometimes "$KVJIT" prewarm --arch sm_90 --k-row-bytes 256,512 --index int64 -j 2 \
    --cache-dir "$TMP/compile-mode" >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 0
  [[ $(grep -c 'KVJIT_COMPILE="sometimes" is not valid' "$TMP/err") -eq 1 ]] ||
    fail "warned $(grep -c 'KVJIT_COMPILE' "$TMP/err") times"
}

# --max-size 0 is refused as KVJIT_CACHE_MAX_SIZE=0 is.
test_max_size_zero_refused() {
  kvjit cache prune --max-size 0 --cache-dir "$TMP/prune0"
  expect_rc 2
  expect_err "bad value '0' for --max-size \\(at least 1 byte"
}

# An entry that cannot be read is listed as such, not as target_0 with blank fields.
test_ls_names_an_unreadable_entry() {
  local dir="$TMP/unreadable" file
  kvjit prewarm --arch sm_90 "${ONE[@]}" --cache-dir "$dir" -j 1
  expect_rc 0
  file=$(entries "$dir" | head -1)
  printf 'not an entry' >"$file"
  kvjit cache ls --cache-dir "$dir"
  expect_rc 0
  expect_out '^\? .* unreadable: '
  if grep -q 'target_' "$TMP/out"; then fail "listed as target_N"; fi
}

test_license_is_apache_2() {
  grep -q 'Apache License' "$ROOT/LICENSE" || fail "no Apache License text"
  grep -q 'Version 2.0, January 2004' "$ROOT/LICENSE" || fail "not version 2.0"
  grep -q 'END OF TERMS AND CONDITIONS' "$ROOT/LICENSE" || fail "not the full text"
  grep -q 'Apache-2.0' "$ROOT/pyproject.toml" || fail "pyproject.toml names another license"
}

run_cases
