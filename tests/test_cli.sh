#!/usr/bin/env bash
# cli suite: the kvjit executable's commands, exit codes and messages, on temp cache dirs.
# Needs NVRTC (prewarm compiles for sm_90 / sm_100), no GPU and no driver.
# Usage: bash tests/test_cli.sh /path/to/kvjit
# Cases are called by name through `declare -F`, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

# shellcheck source=tests/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

# A small variant set keeps the suite quick: 2 variants, a few kernels each.
SMALL=(--k-row-bytes '256,512' --index int64 -j 2)

# --- cases ------------------------------------------------------------------------------------

test_prewarm_then_all_cached() {
  local dir="$TMP/prewarm"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 0
  summary
  [[ $VARIANTS -eq 2 && $COMPILED -eq 2 && $CACHED -eq 0 && $FAILED -eq 0 ]] || fail "first run: $VARIANTS/$COMPILED/$CACHED/$FAILED"
  [[ $KERNELS_COMPILED -ge 2 && $KERNELS_CACHED -eq 0 ]] || fail "first run kernels: $KERNELS_COMPILED/$KERNELS_CACHED"
  # Not a terminal: one plain line per variant, no progress bar.
  [[ $(grep -c '^\[[12]/2\] sm_90 ' "$TMP/err") -eq 2 ]] || fail "expected one line per variant"
  if grep -q $'\r' "$TMP/err"; then fail "progress bar drawn without a terminal"; fi
  # One entry per kernel (an alias when it was built in a bundle) and the bundles; every one checks.
  [[ $(entry_count "$dir") -gt $KERNELS_COMPILED ]] || fail "$(entry_count "$dir") files for $KERNELS_COMPILED kernels"
  [[ $(grep -c '^\[share [12]/2\] kernels: ' "$TMP/err") -eq 2 ]] || fail "expected one line per share"
  # --cache-dir wins over $KVJIT_CACHE_DIR.
  [[ $(entry_count "$KVJIT_CACHE_DIR") -eq 0 ]] || fail "entries written to \$KVJIT_CACHE_DIR"

  local kernels=$KERNELS_COMPILED
  kvjit prewarm --arch sm_90 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 0
  summary
  [[ $VARIANTS -eq 2 && $COMPILED -eq 0 && $CACHED -eq 2 && $FAILED -eq 0 ]] || fail "second run: $VARIANTS/$COMPILED/$CACHED/$FAILED"
  [[ $KERNELS_COMPILED -eq 0 && $KERNELS_CACHED -eq $kernels ]] || fail "second run kernels: $KERNELS_COMPILED/$KERNELS_CACHED"
}

# -j N runs the shares in worker processes (NVRTC serializes one process's compiles on a GPU
# host). A worker killed mid-share: the variants whose kernels it left unbuilt fail and say how
# it ended, the others are unharmed, nothing is reported as success, and a rerun builds the rest.
test_prewarm_worker_killed() {
  local dir="$TMP/killed"
  RC=0
  "$KVJIT" prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256,512,1024,2048 --index int32,int64 \
    -j 2 >"$TMP/out" 2>"$TMP/err" &
  local parent=$! worker="" pid i
  # A worker seen compiling (NVRTC loads its builtins on a process's first compile, and a worker
  # compiles only inside a share it took) is stopped at once, then killed: it has a share in hand
  # and cannot finish it first.
  for i in $(seq 1 2000); do
    for pid in $(pgrep -P "$parent" || true); do
      if grep -q nvrtc-builtins "/proc/$pid/maps" 2>/dev/null; then
        worker=$pid
        break
      fi
    done
    [[ -n $worker ]] && break
    sleep 0.005
  done
  [[ -n $worker ]] || { wait "$parent" || true; fail "no worker seen compiling"; }
  kill -STOP "$worker"
  kill -KILL "$worker"
  wait "$parent" || RC=$?
  expect_rc 1
  summary
  [[ $VARIANTS -eq 8 && $FAILED -ge 1 ]] || fail "after the kill: $VARIANTS variants, $FAILED failed"
  expect_err 'a prewarm worker died \(signal 9\) while building its kernels \[ERR_INTERNAL\]'
  local failed=$FAILED
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256,512,1024,2048 --index int32,int64 -j 2
  expect_rc 0
  summary
  [[ $FAILED -eq 0 && $COMPILED -eq $failed && $((COMPILED + CACHED)) -eq 8 ]] ||
    fail "rerun: $COMPILED compiled, $CACHED cached, $FAILED failed (expected $failed compiled)"
  # Nothing half-written: every entry checks.
  kvjit cache verify --cache-dir "$dir"
  expect_rc 0
}

test_prewarm_env_cache_dir() {
  export KVJIT_CACHE_DIR="$TMP/from-env"
  kvjit prewarm --arch 90 --k-row-bytes 128 --index int32 -j 1
  expect_rc 0
  [[ $(entry_count "$TMP/from-env") -ge 1 ]] || fail "nothing in \$KVJIT_CACHE_DIR"
}

test_prewarm_needs_a_disk_cache() {
  export KVJIT_CACHE_DISABLE=1 # each case runs in its own subshell
  kvjit prewarm --arch sm_90 "${SMALL[@]}"
  expect_rc 1
  expect_err 'no writable cache dir'
}

test_dry_run() {
  local dir="$TMP/dry"
  # The default job: llama-3.1-8b, bf16+fp8, tp 1,2,4,8 -> plain rows 2048..128 B, plus the fp8
  # cache fed from bf16 rows (2048..256 B, quantized with a per-tensor scale), x int32/int64.
  kvjit_n prewarm --arch sm_90 --dry-run --cache-dir "$dir"
  expect_rc 0
  [[ $(dry_run_count) -eq 18 ]] || fail "default: $(dry_run_count) variants, expected 18"
  expect_out '^# .*18 variants'
  expect_out ' k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16 dtype=bf16 cache_dtype=fp8_e4m3 scale=tensor$'
  [[ $(entry_count "$dir") -eq 0 ]] || fail "--dry-run compiled something"

  # Same rows from 8B and 70B, bf16 and fp16: deduplicated.
  kvjit_n prewarm --arch sm_90,sm_100 -n --model llama-3.1-8b,llama-3.1-70b --dtype bf16,fp16,fp8
  expect_rc 0
  [[ $(dry_run_count) -eq 36 ]] || fail "two archs: $(dry_run_count) variants, expected 36"

  # fp8 caches: the plain fp8 row (128 B at tp 8) and each source dtype x scale kind.
  kvjit_n prewarm --arch sm_90 -n --model llama-3.1-8b --dtype fp8_e5m2 --quantize-from bf16,fp32 --scale tensor,head \
    --tp 8 --index int64
  expect_rc 0
  [[ $(dry_run_count) -eq 5 ]] || fail "fp8: $(dry_run_count) variants, expected 5"
  expect_out ' k_row_bytes=512 v_row_bytes=512 .* dtype=f32 cache_dtype=fp8_e5m2 scale=head num_heads=1$'
  kvjit_n prewarm --arch sm_90 -n --model llama-3.1-8b --dtype fp8 --quantize-from none --tp 8 --index int64
  expect_rc 0
  [[ $(dry_run_count) -eq 1 ]] || fail "fp8 without quantizing: $(dry_run_count) variants, expected 1"
  kvjit_n prewarm --arch sm_90 -n --k-row-bytes 256 --scale head
  expect_rc 2
  expect_err 'cannot be combined'

  # tp above the KV heads replicates: one head per rank (qwen2.5-7b has 4).
  kvjit_n prewarm --arch sm_90 -n --model qwen2.5-7b --dtype bf16 --tp 4,8 --index int64
  expect_rc 0
  [[ $(dry_run_count) -eq 1 ]] || fail "qwen tp 4,8: $(dry_run_count) variants, expected 1"
  expect_out '^store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16$'

  # A custom shape; MLA-like K only.
  kvjit_n prewarm --arch sm_90 -n --kv-heads 1 --head-dim 576 --v-head-dim 0 --dtype bf16 --tp 1,8 --index int64
  expect_rc 0
  [[ $(dry_run_count) -eq 1 ]] || fail "K only: $(dry_run_count) variants, expected 1"
  expect_out ' k_row_bytes=1152 v_row_bytes=0 '

  # Layout presets (issue 29): NHD is flat (the plain line); HND and FlashAttention share a static
  # part; the chunked K + transposed V takes its own V access width; block sizes multiply.
  kvjit_n prewarm --arch sm_90 -n --model llama-3.1-8b --dtype bf16 --tp 1 --index int64 \
    --layout vllm-nhd,vllm-hnd,flash,vllm-chunked --block-size 16,32
  expect_rc 0
  [[ $(dry_run_count) -eq 5 ]] || fail "layouts: $(dry_run_count) variants, expected 5"
  expect_out 'vec=16$'
  expect_out ' vec=16 k_page=16 k_atom=256 v_page=16 v_atom=256$'
  expect_out ' vec=16 k_page=32 k_atom=16 v_page=32 v_atom=2 v_vec=2$'
  # transfer_kv's presets are SGLang's host pool on the host side (test_transfer_presets checks
  # their keys against the call's): page_head pages of 64 with runs of one head; page_first is
  # flat slots once canonical; a store preset is refused for it.
  kvjit_n prewarm --arch sm_90 -n --op transfer_kv --model llama-3.1-8b --dtype bf16 --tp 1 \
    --layout page_first,page_head --block-size 64 --src device --dst host --layers table
  expect_rc 0
  [[ $(dry_run_count) -eq 2 ]] || fail "transfer layouts: $(dry_run_count) variants, expected 2"
  expect_out 'dst=host layers=table pdl=auto split=0 vec=16$'
  expect_out ' vec=16 dst_page=64 dst_atom=256$'
  kvjit_n prewarm --arch sm_90 -n --op transfer_kv --model llama-3.1-8b --layout vllm-flash
  expect_rc 2
  expect_err 'vllm-flash is a store_kv_cache preset'
  kvjit_n prewarm --arch sm_90 -n --model llama-3.1-8b --layout vllm-pagd
  expect_rc 2
  expect_err "bad value 'vllm-pagd' for --layout"
  kvjit_n prewarm --arch sm_90 -n --k-row-bytes 256 --layout vllm-hnd
  expect_rc 2
  expect_err 'need a model'

  # Row sizes, every K x V pair, x index x pdl; pdl=on is dropped before sm_90.
  kvjit_n prewarm --arch sm_80 -n --k-row-bytes 256,512 --v-row-bytes 0,128 --index int32,int64 --pdl on,off
  expect_rc 0
  [[ $(dry_run_count) -eq 8 ]] || fail "rows: $(dry_run_count) variants, expected 8"
  expect_err 'skipped 8 combinations'

  # --split all: auto plus 1, 2, 4, 8, 16 (parts of >= 16 B); an explicit split must divide the rows.
  kvjit_n prewarm --arch sm_90 -n --k-row-bytes 256 --index int64 --split all
  expect_rc 0
  [[ $(dry_run_count) -eq 6 ]] || fail "split all: $(dry_run_count) variants, expected 6"
  kvjit_n prewarm --arch sm_90 -n --k-row-bytes 192,256 --index int64 --split 3
  expect_rc 0
  [[ $(dry_run_count) -eq 1 ]] || fail "split 3: $(dry_run_count) variants, expected 1"
  expect_out ' k_row_bytes=192 .* split=3 '
}

test_manifest_round_trip() {
  local dir="$TMP/manifest" manifest="$TMP/manifest.txt"
  # Two variants written by hand in the format of cache/MANIFEST.md; the recorded arch is replaced.
  cat >"$manifest" <<'EOF'
# recorded by a serving run

store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16
store_kv_cache arch=0 k_row_bytes=1152 v_row_bytes=0 index=int32 pdl=off split=2 vec=16  # MLA, K only
store_kv_cache arch=90 k_row_bytes=512 v_row_bytes=512 index=int64 pdl=auto split=0 vec=16 dtype=bf16 cache_dtype=fp8_e4m3 scale=head num_heads=2
EOF
  kvjit prewarm --manifest "$manifest" --arch sm_90,sm_100 --cache-dir "$dir" -j 2
  expect_rc 0
  summary
  [[ $VARIANTS -eq 6 && $FAILED -eq 0 && $COMPILED -eq 6 ]] || fail "replay: $VARIANTS/$COMPILED/$FAILED"
  kvjit cache ls --cache-dir "$dir"
  expect_rc 0
  expect_out '^sm_90 '
  expect_out '^sm_100 '
  expect_out 'kvjit_store_kv<([0-9]+,){8}[123],[12],'  # a quantizing store (source dtype, fp8 kind)

  # --dry-run prints manifest lines: its output replays to the same variants, all cached.
  kvjit_n prewarm --arch sm_90 -n "${SMALL[@]}"
  cp "$TMP/out" "$TMP/dry-manifest.txt"
  kvjit prewarm --manifest "$TMP/dry-manifest.txt" --arch sm_90 --cache-dir "$dir"
  expect_rc 0
  summary
  [[ $VARIANTS -eq 2 && $FAILED -eq 0 ]] || fail "dry-run replay: $VARIANTS/$FAILED"

  # A bad line is named by file:line, exit 2.
  printf '# ok\n\nthis is not a variant\n' >"$TMP/bad-manifest.txt"
  kvjit prewarm --manifest "$TMP/bad-manifest.txt" --arch sm_90 --cache-dir "$dir"
  expect_rc 2
  expect_err "bad-manifest.txt:3:"
}

test_verify_quarantines_corrupt_entry() {
  local dir="$TMP/verify"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 0
  kvjit cache verify --cache-dir "$dir"
  expect_rc 0
  expect_out ' 0 bad'

  local victim size
  victim=$(entries "$dir" | sort | head -1)
  size=$(stat -c %s "$victim")
  # Flip bytes in the middle (the payload), not the header: only the checksum can tell.
  local offset=$((size / 2)) byte
  byte=$(od -An -tu1 -j "$offset" -N1 "$victim" | tr -d ' ')
  printf '%b' "\\$(printf '%03o' $(((byte ^ 0xff) & 0xff)))" | dd of="$victim" bs=1 seek="$offset" conv=notrunc status=none

  kvjit cache verify --cache-dir "$dir"
  expect_rc 1
  expect_out "^bad: $victim"
  expect_out ' 1 bad'
  [[ ! -e "$victim" ]] || fail "corrupt entry left in place"
  [[ -n $(find "$dir" -path '*quarantine*' -type f) ]] || fail "nothing quarantined"

  kvjit cache verify --cache-dir "$dir"
  expect_rc 0
  expect_out ' 0 bad'
}

test_prune_respects_limit() {
  local dir="$TMP/prune"
  # Three archs, three bundles: a prune removes a bundle with its aliases, so half the cache keeps
  # at least one of them whole.
  kvjit prewarm --arch sm_80,sm_90,sm_100 --cache-dir "$dir" --k-row-bytes 128,256,512,1024 --index int32,int64 -j 2
  expect_rc 0
  local before limit_k
  before=$(entry_bytes "$dir")
  limit_k=$((before / 2 / 1024))
  ((limit_k > 0)) || fail "entries too small to prune ($before bytes)"

  kvjit cache prune --cache-dir "$dir" --max-size "${limit_k}K"
  expect_rc 0
  expect_out 'removed [1-9][0-9]* entries'
  local after
  after=$(entry_bytes "$dir")
  ((after <= limit_k * 1024)) || fail "$after bytes left, limit $((limit_k * 1024))"
  ((after > 0)) || fail "pruned everything for a limit of half the cache"

  # (0 is refused, as KVJIT_CACHE_MAX_SIZE=0 is: test_cli_newcomer.sh; no entry fits in 1 byte.)
  kvjit cache prune --cache-dir "$dir" --max-size 1
  expect_rc 0
  [[ $(entry_count "$dir") -eq 0 ]] || fail "--max-size 1 left entries"
}

test_ls_and_clear() {
  local dir="$TMP/clear"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 0
  local n
  n=$(entry_count "$dir")
  kvjit cache ls --cache-dir "$dir"
  expect_rc 0
  expect_out "^$n entries"
  [[ $(grep -c '^sm_90 ' "$TMP/out") -eq $n ]] || fail "ls shows $(grep -c '^sm_90 ' "$TMP/out") of $n entries"

  # Read-only dirs are listed with --all only.
  kvjit cache ls --cache-dir "$TMP/empty-write" --cache-path "$dir"
  expect_rc 0
  expect_out '^0 entries'
  kvjit cache ls --all --cache-dir "$TMP/empty-write" --cache-path "$dir"
  expect_rc 0
  expect_out "^$n entries"
  expect_out '^sm_90 .* ro '

  kvjit cache clear --cache-dir "$dir"
  expect_rc 0
  expect_out "removed $n entries"
  [[ $(entry_count "$dir") -eq 0 ]] || fail "entries left after clear"
  kvjit cache ls --cache-dir "$dir"
  expect_out '^0 entries'
}

test_cache_path() {
  kvjit cache path --cache-dir "$TMP/pathdir" --cache-path "$TMP/ro1:$TMP/ro2"
  expect_rc 0
  expect_out "^write: $TMP/pathdir\$"
  expect_out "^read: +$TMP/ro1\$"
  expect_out "^read: +$TMP/ro2\$"
  kvjit cache path
  expect_rc 0
  expect_out "^write: $KVJIT_CACHE_DIR\$"
}

test_info_without_driver() {
  kvjit info --cache-dir "$TMP/info"
  expect_rc 0
  expect_out '^kvjit: +[0-9]+\.[0-9]+\.[0-9]+'
  expect_out '^nvrtc: +[0-9]+\.[0-9]+.* sm_90'
  expect_out '^driver: '
  # info only looks: a dir that does not exist is reported missing, and stays so.
  expect_out "write: $TMP/info: 0 entries, 0B, missing"
  [[ ! -e "$TMP/info" ]] || fail "info created $TMP/info"
  if no_driver; then
    expect_out '^driver: +none$'
  fi
}

test_info_without_nvrtc() {
  KVJIT_NVRTC=/nonexistent kvjit info --cache-dir "$TMP/info"
  expect_rc 0
  expect_out '^nvrtc: +none \(no NVRTC: tried /nonexistent'
  KVJIT_NVRTC=/nonexistent kvjit prewarm --arch sm_90 --cache-dir "$TMP/no-nvrtc" --model llama-3.1-8b
  expect_rc 1
  expect_err 'NVRTC'
}

test_no_arch_without_gpu() {
  no_driver || return 0 # with a GPU the default arch is its own
  kvjit prewarm --dry-run
  expect_rc 2
  expect_err 'no --arch and no GPU'
}

test_help_and_version() {
  local cmd
  for cmd in "" prewarm cache "cache ls" "cache verify" "cache prune" "cache clear" "cache path" info; do
    # shellcheck disable=SC2086 # word splitting of "cache ls" is wanted
    kvjit $cmd --help
    expect_rc 0
    expect_out '^Usage: kvjit'
  done
  kvjit --version
  expect_rc 0
  expect_out '^kvjit [0-9]+\.[0-9]+\.[0-9]+$'
  kvjit
  expect_rc 2
}

# bad FLAG VALUE ARGS...: exit 2 and one stderr line naming FLAG (and VALUE when not empty).
bad() {
  local flag=$1 value=$2
  shift 2
  kvjit "$@"
  [[ $RC -eq 2 ]] || fail "kvjit $*: exit $RC, expected 2"
  [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "kvjit $*: expected one line on stderr"
  grep -qF -- "$flag" "$TMP/err" || fail "kvjit $*: message does not name $flag"
  [[ -z $value ]] || grep -qF -- "$value" "$TMP/err" || fail "kvjit $*: message does not name '$value'"
  [[ ! -s "$TMP/out" ]] || fail "kvjit $*: wrote to stdout"
}

test_bad_flags() {
  bad --arch sm_9x prewarm --arch sm_9x
  bad --arch sm_91 prewarm --arch sm_90,sm_91
  bad --arch '' prewarm --arch
  bad --tp 0 prewarm --arch sm_90 --tp 0
  bad --tp 3 prewarm --arch sm_90 --tp 1,3
  bad --kv-heads 3 prewarm --arch sm_90 --kv-heads 8 --head-dim 128 --tp 3
  bad --kv-heads '' prewarm --arch sm_90 --head-dim 128
  bad --dtype int7 prewarm --arch sm_90 --dtype bf16,int7
  bad --quantize-from int8 prewarm --arch sm_90 --quantize-from int8
  bad --scale row prewarm --arch sm_90 --scale tensor,row
  bad -j 0 prewarm --arch sm_90 -j 0
  bad --jobs x prewarm --arch sm_90 --jobs x
  bad --index int16 prewarm --arch sm_90 --index int16
  bad --pdl maybe prewarm --arch sm_90 --pdl maybe
  bad --split x prewarm --arch sm_90 --split x
  bad --vec 3 prewarm --arch sm_90 --vec 3
  bad --k-row-bytes 0 prewarm --arch sm_90 --k-row-bytes 0
  bad --v-row-bytes -1 prewarm --arch sm_90 --k-row-bytes 256 --v-row-bytes -1
  bad --model gpt-17 prewarm --arch sm_90 --model gpt-17
  bad --k-row-bytes '' prewarm --arch sm_90 --k-row-bytes 256 --tp 2
  bad --manifest "$TMP/nonexistent" prewarm --arch sm_90 --manifest "$TMP/nonexistent"
  bad --bogus '' prewarm --bogus
  bad -q '' prewarm -q
  bad --dry-run '' prewarm --dry-run=yes
  bad extra '' prewarm --arch sm_90 extra
  bad --max-size 5Q cache prune --max-size 5Q
  bad --max-size '' cache prune --max-size
  bad --max-size '' cache ls --max-size 1G
  bad --all '' cache clear --all
  bad --cache-dir '' cache ls --cache-dir
  bad frob '' cache frob
  bad frob '' frob
  bad --x '' info --x
}

# --- --op: every op's variants from its field table ------------------------------------------

test_op_transfer_kv_dry_run() {
  # Choices of the op's own fields; the model options give the rows (plain rows only: no quantizing).
  kvjit_n prewarm --op transfer_kv --arch sm_90 -n --k-row-bytes 2048 --src device --dst host --layers one,table
  expect_rc 0
  [[ $(dry_run_count) -eq 2 ]] || fail "transfer rows: $(dry_run_count) variants, expected 2"
  expect_out '^transfer_kv arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto split=0 vec=16$'
  expect_out ' layers=table '
  # Defaults of the op: int64, both sides x both sides, both layer modes; bf16 and fp8 rows at tp 8.
  kvjit_n prewarm --op transfer_kv --arch sm_90 -n --model llama-3.1-8b --tp 8
  expect_rc 0
  [[ $(dry_run_count) -eq 16 ]] || fail "transfer defaults: $(dry_run_count) variants, expected 16"
  expect_out ' k_row_bytes=128 v_row_bytes=128 index=int64 src=host dst=host layers=table '
  # pdl=on before sm_90 is skipped and said so.
  kvjit_n prewarm --op transfer_kv --arch sm_80 -n --k-row-bytes 512 --src host --dst device --layers one --pdl on,off
  expect_rc 0
  [[ $(dry_run_count) -eq 1 ]] || fail "pdl on sm_80: $(dry_run_count) variants, expected 1"
  expect_err 'skipped 1 combinations the op refuses \(the first: pdl'
  # The store is still the default op, and by name the same.
  kvjit_n prewarm --op store_kv_cache --arch sm_90 -n --k-row-bytes 256 --index int64
  expect_rc 0
  [[ $(dry_run_count) -eq 1 ]] || fail "store by name: $(dry_run_count) variants, expected 1"
}

test_op_bad_flags() {
  bad --op transfer prewarm --arch sm_90 --op transfer
  bad --src store_kv_cache prewarm --arch sm_90 --k-row-bytes 256 --src host
  bad --src gpu prewarm --op transfer_kv --arch sm_90 --k-row-bytes 256 --src gpu
  bad --layers all prewarm --op transfer_kv --arch sm_90 --k-row-bytes 256 --layers all
  bad --vec 3 prewarm --op transfer_kv --arch sm_90 --k-row-bytes 256 --vec 3
  bad --quantize-from '' prewarm --op transfer_kv --arch sm_90 --quantize-from bf16
  bad --manifest '' prewarm --op transfer_kv --arch sm_90 --manifest /dev/null
}

test_op_prewarm_and_mixed_manifest() {
  local dir="$TMP/ops" manifest="$TMP/ops-manifest.txt"
  kvjit prewarm --op transfer_kv --arch sm_90 --cache-dir "$dir" --k-row-bytes 1024 --src device --dst host \
    --layers one -j 2
  expect_rc 0
  summary
  [[ $VARIANTS -eq 1 && $COMPILED -eq 1 && $FAILED -eq 0 ]] || fail "transfer prewarm: $VARIANTS/$COMPILED/$FAILED"
  kvjit cache ls --cache-dir "$dir"
  expect_rc 0
  expect_out 'kvjit_transfer_kv.cu'
  # A manifest holds lines of every op; each replays once per --arch.
  {
    echo '# recorded by a serving run with a host cache'
    echo 'store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16'
    echo 'transfer_kv arch=90 k_row_bytes=1024 v_row_bytes=1024 index=int64 src=device dst=host layers=one pdl=auto split=0 vec=16'
    echo 'transfer_kv arch=0 k_row_bytes=576 v_row_bytes=0 index=int32 src=host dst=device layers=table pdl=off split=0 vec=16  # MLA'
  } >"$manifest"
  kvjit prewarm --manifest "$manifest" --arch sm_90,sm_100 --cache-dir "$dir" -j 2
  expect_rc 0
  summary
  [[ $VARIANTS -eq 6 && $FAILED -eq 0 && $CACHED -eq 1 && $COMPILED -eq 5 ]] ||
    fail "mixed replay: $VARIANTS/$COMPILED/$CACHED/$FAILED"
  # --dry-run of an op replays to the same variants, all cached.
  kvjit_n prewarm --op transfer_kv --arch sm_90 -n --k-row-bytes 1024 --src device --dst host --layers one
  cp "$TMP/out" "$TMP/ops-dry.txt"
  kvjit prewarm --manifest "$TMP/ops-dry.txt" --arch sm_90 --cache-dir "$dir"
  expect_rc 0
  summary
  [[ $VARIANTS -eq 1 && $CACHED -eq 1 && $FAILED -eq 0 ]] || fail "dry-run replay: $VARIANTS/$CACHED/$FAILED"
  # A bad line of the second op is named by file:line too.
  echo 'transfer_kv arch=90 k_row_bytes=1024 v_row_bytes=1024 index=int64 src=gpu dst=host layers=one pdl=auto split=0 vec=16' \
    >"$TMP/ops-bad.txt"
  kvjit prewarm --manifest "$TMP/ops-bad.txt" --arch sm_90 --cache-dir "$dir"
  expect_rc 2
  expect_err "ops-bad.txt:1: src: bad value"
}

# --- issue 15: hostile environments ---------------------------------------------------------------

# Any entry file of a dir (the first, sorted).
first_entry() { entries "$1" | sort | head -1; }

test_special_files() {
  local dir="$TMP/special" victim
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256 --index int64 -j 1
  expect_rc 0
  victim=$(first_entry "$dir")
  # A FIFO named like an entry: nothing blocks; verify names it, prewarm rebuilds it.
  rm "$victim" && mkfifo "$victim"
  RC=0
  timeout 20 "$KVJIT" cache verify --cache-dir "$dir" >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 1
  expect_out "^bad: $victim: not a regular file"
  [[ ! -p "$victim" ]] || fail "the FIFO was left in place"
  rm -f "$victim" && mkfifo "$victim"
  RC=0
  timeout 60 "$KVJIT" prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256 --index int64 -j 1 \
    >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 0
  [[ -f "$victim" ]] || fail "the entry was not rebuilt over the FIFO"
  # A 1 GiB sparse file named like an entry: listed from its size alone, quickly, in little memory.
  rm "$victim" && truncate -s 1G "$victim"
  local start=$SECONDS
  if [[ -x /usr/bin/time ]]; then
    RC=0
    timeout 20 /usr/bin/time -f '%M' -o "$TMP/rss" "$KVJIT" cache ls --cache-dir "$dir" >"$TMP/out" 2>"$TMP/err" || RC=$?
    (($(tail -1 "$TMP/rss") < 100000)) || fail "cache ls used $(tail -1 "$TMP/rss") KiB"
  else
    RC=0
    timeout 20 "$KVJIT" cache ls --cache-dir "$dir" >"$TMP/out" 2>"$TMP/err" || RC=$?
  fi
  expect_rc 0
  ((SECONDS - start < 5)) || fail "cache ls took $((SECONDS - start)) s"
  kvjit cache verify --cache-dir "$dir"
  expect_rc 1
  expect_out "more than the format allows"
  # --manifest: a FIFO, a device, NUL bytes, an endless line: exit 2 at once, never a long read.
  mkfifo "$TMP/manifest.fifo"
  local m
  for m in "$TMP/manifest.fifo" /dev/zero; do
    RC=0
    timeout 10 "$KVJIT" prewarm --arch sm_90 --cache-dir "$dir" --manifest "$m" >"$TMP/out" 2>"$TMP/err" || RC=$?
    expect_rc 2
    expect_err "not a regular file"
  done
  truncate -s 1M "$TMP/manifest.zeros"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --manifest "$TMP/manifest.zeros"
  expect_rc 2
  expect_err "manifest.zeros:1: longer than 511 characters"
  printf 'store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16\0garbage\n' \
    >"$TMP/manifest.nul"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --manifest "$TMP/manifest.nul"
  expect_rc 2
  expect_err "manifest.nul:1: a NUL byte"
  head -c 3000000 /dev/zero | tr '\0' 'x' >"$TMP/manifest.long"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --manifest "$TMP/manifest.long"
  expect_rc 2
  expect_err "manifest.long:1: longer than 511"
}

test_hostile_numbers() {
  local v
  for v in 18014398509481985K 18446744073709551616 -1 1.5G 0x10 ' 1G' '1G ' 5Q +5 G 1GG; do
    bad --max-size "$v" cache prune --cache-dir "$TMP/numbers" --max-size "$v"
  done
  for v in 10KIB 64KB 64KiB 1048576 500m; do
    kvjit cache prune --cache-dir "$TMP/numbers" --max-size "$v"
    expect_rc 0
  done
  for v in 4294967297 -1 0x2 +2 1.5 1025; do
    bad -j "$v" prewarm --arch sm_90 -n -j "$v"
  done
  bad --k-row-bytes 99999999999999999999 prewarm --arch sm_90 -n --k-row-bytes 99999999999999999999
  bad --tp 4294967297 prewarm --arch sm_90 -n --tp 4294967297
  bad --kv-heads +8 prewarm --arch sm_90 -n --kv-heads +8 --head-dim 128
  bad --vec 0x10 prewarm --arch sm_90 -n --vec 0x10
  bad --split 1e3 prewarm --arch sm_90 -n --split 1e3
  # The environment: one warning naming the variable and the value, and the default used.
  local var value
  for var in KVJIT_CACHE_MAX_SIZE KVJIT_LOCK_TIMEOUT_MS KVJIT_CACHE_DISABLE KVJIT_CACHE_ALLOW_SHARED; do
    for value in 18014398509481985K -1 maybe; do
      RC=0
      env -u KVJIT_LOG "$var=$value" "$KVJIT" info --cache-dir "$TMP/numbers" >"$TMP/out" 2>"$TMP/err" || RC=$?
      expect_rc 0
      [[ $(grep -c . "$TMP/err") -eq 1 ]] || fail "$var=$value: expected one warning line"
      expect_err "warning: ignoring $var=\"$value\" .*default"
    done
  done
  KVJIT_CACHE_MAX_SIZE=10KIB kvjit info --cache-dir "$TMP/numbers"
  expect_out 'budget 10.0K'
  KVJIT_CACHE_MAX_SIZE=1.5G kvjit info --cache-dir "$TMP/numbers"
  expect_out 'budget 2.0G'
  [[ ! -s "$TMP/err" ]] || fail "KVJIT_LOG=0 did not silence the warning"
  KVJIT_CACHE_DISABLE=maybe kvjit cache path --cache-dir "$TMP/numbers"
  expect_out "^write: $TMP/numbers\$"
}

# Commands whose output cannot be written, and prewarms that cannot write, never report success.
test_failures_are_not_success() {
  local dir="$TMP/fail" cmd
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256 --index int64 -j 1
  expect_rc 0
  for cmd in "cache ls" "cache verify" "cache path" info "prewarm --arch sm_90 -n --k-row-bytes 256"; do
    RC=0
    # shellcheck disable=SC2086 # word splitting of $cmd is wanted
    "$KVJIT" $cmd --cache-dir "$dir" >/dev/full 2>"$TMP/err" || RC=$?
    [[ $RC -eq 1 ]] || fail "$cmd > /dev/full: exit $RC, expected 1"
    expect_err 'cannot write to standard output: No space left on device'
  done
  # Options or a manifest that build nothing: exit 2, saying why.
  bad 'nothing to build' '' prewarm --arch sm_90 -n --k-row-bytes 256 --split 3
  bad 'nothing to build' '' prewarm --arch sm_80 -n --k-row-bytes 256 --pdl on
  printf '# nothing here\n\n' >"$TMP/empty-manifest"
  bad 'lists no variant' '' prewarm --arch sm_90 --manifest "$TMP/empty-manifest"
  # A temp path past PATH_MAX: every variant fails, exit 1, with the reason.
  local long="$TMP/long" part
  part=$(printf 'd%.0s' {1..200})
  while ((${#long} + 201 < 4050 - 3)); do long="$long/$part"; done
  long="$long/$(printf 'e%.0s' $(seq 1 $((4050 - 3 - ${#long} - 1))))"
  mkdir -p "$long"
  kvjit prewarm --arch sm_90 --cache-dir "$long" --k-row-bytes 256 --index int64 -j 1
  expect_rc 1
  summary
  [[ $FAILED -eq 1 && $COMPILED -eq 0 ]] || fail "long path: $COMPILED compiled, $FAILED failed"
  expect_err 'File name too long'
  # A full file system (where this user may mount one in a private namespace).
  if unshare -m true 2>/dev/null; then
    mkdir -p "$TMP/full"
    RC=0
    unshare -m bash -c "mount -t tmpfs -o size=16k,mode=0700 tmpfs '$TMP/full' && '$KVJIT' prewarm --arch sm_90 \
      --cache-dir '$TMP/full' --k-row-bytes 128,256,512,1024 --index int64 -j 1" >"$TMP/out" 2>"$TMP/err" || RC=$?
    expect_rc 1
    summary
    ((FAILED > 0)) || fail "full tmpfs: nothing failed"
    expect_err 'No space left on device'
  fi
  # verify of a read-only mount: every entry is checked, the bad ones reported and left in place.
  if unshare -m true 2>/dev/null; then
    local ro="$TMP/ro-mount" victim
    kvjit prewarm --arch sm_90 --cache-dir "$ro" --k-row-bytes 256,512 --index int64 -j 1
    expect_rc 0
    victim=$(first_entry "$ro")
    printf 'garbage' >"$victim"
    RC=0
    unshare -m bash -c "mount --bind '$ro' '$ro' && mount -o remount,bind,ro '$ro' && '$KVJIT' cache verify \
      --cache-dir '$ro'" >"$TMP/out" 2>"$TMP/err" || RC=$?
    expect_rc 1
    expect_err 'not writable: Read-only file system; bad entries are reported and left in place'
    expect_out "^bad: $victim: .*left in place"
    expect_out '^verified [1-9][0-9]* entries: 1 bad'
  fi
  # verify: a dir that does not exist or that the loader refuses says so, exit 1, creates nothing.
  kvjit cache verify --cache-dir "$TMP/no/such/cache"
  expect_rc 1
  expect_err 'does not exist: nothing to verify'
  [[ ! -e "$TMP/no" ]] || fail "verify created $TMP/no"
  mkdir "$TMP/shared" && chmod 777 "$TMP/shared"
  kvjit cache verify --cache-dir "$TMP/shared"
  expect_rc 1
  expect_err 'writable by other users'
  [[ ! -e "$TMP/shared/v2" ]] || fail "verify made $TMP/shared/v2"
  # verify applies the loader's trust: a mode 0666 entry is bad.
  chmod 0666 "$(first_entry "$dir")"
  kvjit cache verify --cache-dir "$dir"
  expect_rc 1
  expect_out 'writable by other users'
}

test_manifest_rules() {
  local base='store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0'
  local quant='dtype=bf16 cache_dtype=fp8_e4m3'
  local long
  long="$base vec=16 #$(printf 'x%.0s' {1..420})"
  local -a lines=(
    "$base vec=16 bogus=1|unknown key"
    "$base vec=16 vec=8|given twice"
    "$base|missing vec="
    "$base vec=3|vec: bad value"
    "$base vec=+16|vec: bad value"
    "$base vec=0x10|vec: bad value"
    "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=3 vec=16|does not divide"
    "store_kv_cache arch=80 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=on split=0 vec=16|sm_90"
    "$base vec=16 cache_dtype=fp8_e4m3|needs an f16, bf16 or f32 source"
    "store_kv_cache arch=90 k_row_bytes=255 v_row_bytes=255 index=int64 pdl=auto split=0 vec=16 $quant|whole number"
    "$base vec=16 $quant scale=head num_heads=3|does not divide"
    "$base vec=16 $quant scale=tensor num_heads=2|without scale=head"
    "$base vec=16 dtype=bf16|dtype: not part of this"
    "$base vec=16 scale=none|scale: not part of this"
    "$long|longer than 511"
    "STORE_KV_CACHE arch=90|must start with"
  )
  local entry text why
  for entry in "${lines[@]}"; do
    text=${entry%|*} why=${entry##*|}
    printf '# header\n%s\n' "$text" >"$TMP/rules.txt"
    kvjit prewarm --arch sm_90 -n --manifest "$TMP/rules.txt"
    [[ $RC -eq 2 ]] || fail "'$text': exit $RC, expected 2"
    expect_err "rules.txt:2: .*$why"
  done
  printf '%s vec=16\r\n  # comment\r\n\t%s vec=8 %s scale=tensor # trailing\n' "$base" "$base" "$quant" >"$TMP/rules.txt"
  kvjit prewarm --arch sm_90 -n --manifest "$TMP/rules.txt"
  expect_rc 0
  [[ $(dry_run_count) -eq 2 ]] || fail "good lines: $(dry_run_count) variants, expected 2"
}

test_paths() {
  # An empty --cache-dir is unset: the environment's dir, never "/v2".
  kvjit cache path --cache-dir ''
  expect_rc 0
  expect_out "^write: $KVJIT_CACHE_DIR\$"
  # Read-only commands create nothing, not even a missing dir's parents.
  kvjit cache ls --cache-dir "$TMP/nonexistent/x"
  expect_rc 0
  kvjit info --cache-dir "$TMP/nonexistent/x"
  expect_rc 0
  kvjit cache clear --cache-dir "$TMP/nonexistent/x"
  expect_rc 0
  expect_out 'does not exist: removed 0 entries'
  [[ ! -e "$TMP/nonexistent" ]] || fail "a read-only command created $TMP/nonexistent"
  # A dir others can write is refused before anything is made in it.
  mkdir -p "$TMP/like-tmp" && chmod 1777 "$TMP/like-tmp"
  kvjit prewarm --arch sm_90 --cache-dir "$TMP/like-tmp" --k-row-bytes 256 --index int64 -j 1
  expect_rc 1
  expect_err 'writable by other users'
  [[ ! -e "$TMP/like-tmp/v2" ]] || fail "prewarm made $TMP/like-tmp/v2"
  kvjit cache ls --cache-dir "$TMP/like-tmp"
  expect_rc 0
  expect_err 'note: no writable cache dir listed'
  # Relative KVJIT_CACHE_DIR: made absolute. Relative HOME: ignored, with a warning.
  mkdir -p "$TMP/cwd"
  RC=0
  (cd "$TMP/cwd" && KVJIT_CACHE_DIR=rel/dir "$KVJIT" cache path) >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 0
  expect_out "^write: $TMP/cwd/rel/dir\$"
  RC=0
  (cd "$TMP/cwd" && env -u KVJIT_CACHE_DIR -u XDG_CACHE_HOME -u KVJIT_LOG HOME=relative-home "$KVJIT" cache path) \
    >"$TMP/out" 2>"$TMP/err" || RC=$?
  expect_rc 0
  expect_err 'ignoring HOME="relative-home": not an absolute path'
  if grep -q 'relative-home' "$TMP/out"; then fail "a relative HOME was used"; fi
  [[ ! -e "$TMP/cwd/relative-home" ]] || fail "created a dir under the relative HOME"
}

test_closed_stdio() {
  local dir="$TMP/stdio"
  # stdout and stderr closed: the lock file must not become fd 1 and receive the summary.
  RC=0
  "$KVJIT" prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256 --index int64 -j 1 >&- 2>&- || RC=$?
  expect_rc 0
  if grep -aq 'prewarm' "$dir/v2/lock"; then fail "output went into the lock file"; fi
  kvjit cache verify --cache-dir "$dir"
  expect_rc 0
  expect_out ' 0 bad'
}

# Issue 20: what a cache holds, whether a server would hit, a cache as one file.
test_fleet_audit_check_export_import() {
  local dir="$TMP/fleet" other="$TMP/fleet-other" pack="$TMP/fleet.kvjitpak"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 0
  summary
  local n kernels=$KERNELS_COMPILED
  n=$(entry_count "$dir")
  # ls says what each entry is: the target, the compiler, the variant's manifest line.
  kvjit cache ls --cache-dir "$dir"
  expect_rc 0
  expect_out '^TARGET .* COMPILER +PROGRAM +WHAT'
  expect_out '^sm_90 .* NVRTC [0-9]+\.[0-9]+ +kvjit_store_kv_cache.cu +store_kv_cache arch=90 k_row_bytes=256 '
  kvjit cache ls --json --cache-dir "$dir"
  expect_rc 0
  python3 -c 'import json, sys; rows = json.load(open(sys.argv[1])); assert len(rows) == int(sys.argv[2]), rows
assert all(r["op"] == "store_kv_cache" and r["target"] == "sm_90" for r in rows)
aliases = [r for r in rows if r["bundle"]]
assert aliases and all(r["variant"].startswith("store_kv_cache arch=90") for r in aliases)
assert all(r["bundle"] in {b["key"] for b in rows if not b["bundle"]} for r in aliases)' \
    "$TMP/out" "$n" || fail "ls --json is not what ls shows"
  # Would a server hit? Yes for what was built, no (exit 1, the variant named) for the rest.
  kvjit cache check --arch sm_90 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 0
  expect_out "check: 2 variants, [0-9]+ kernels: [0-9]+ cached locally, 0 on the remote, 0 would miss"
  kvjit cache check --arch sm_90 --cache-dir "$dir" --k-row-bytes 256,1024 --index int64
  expect_rc 1
  expect_out '^miss: store_kv_cache arch=90 k_row_bytes=1024 '
  kvjit cache check --arch sm_90,sm_100 --cache-dir "$dir" "${SMALL[@]}"
  expect_rc 1
  expect_out '^miss: store_kv_cache arch=100 '
  kvjit cache check --cache-dir "$dir" --k-row-bytes banana
  expect_rc 2
  # prewarm -n marks each line, and the lines stay manifest lines.
  kvjit prewarm -n --arch sm_90 --cache-dir "$dir" --k-row-bytes 256,1024 --index int64
  expect_rc 0
  expect_out 'k_row_bytes=256 .*# cached$'
  expect_out 'k_row_bytes=1024 .*# missing 3 of 3 kernels$'
  # Export and import: the other dir hits every variant with nothing compiled.
  kvjit cache export "$pack" --cache-dir "$dir"
  expect_rc 0
  expect_out "exported $n entries"
  kvjit cache import "$pack" --cache-dir "$other"
  expect_rc 0
  expect_out "imported $n entries .*0 already cached, 0 bad"
  kvjit prewarm --arch sm_90 --cache-dir "$other" "${SMALL[@]}"
  expect_rc 0
  summary
  [[ $COMPILED -eq 0 && $KERNELS_CACHED -eq $kernels ]] || fail "imported cache compiled $COMPILED variants"
  # A damaged pack imports nothing; export and import take exactly one FILE.
  printf 'X' | dd of="$pack" bs=1 seek=40 conv=notrunc status=none
  kvjit cache import "$pack" --cache-dir "$TMP/fleet-third"
  expect_rc 1
  expect_err 'checksum mismatch'
  [[ $(entry_count "$TMP/fleet-third") -eq 0 ]] || fail "a damaged pack imported entries"
  kvjit cache export --cache-dir "$dir"
  expect_rc 2
  kvjit cache import a b --cache-dir "$dir"
  expect_rc 2
}


# --- issue 24 ---------------------------------------------------------------------------------

# Every file kvjit writes outside its entries: never over a FIFO, a device node (made here, never
# a real /dev node), a dir or a link, never into a cache dir; exit 1 naming why, nothing replaced.
test_issue24_write_targets_refused() {
  local dir="$TMP/targets" t="$TMP/targets-out"
  mkdir -p "$t"
  kvjit prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 256 --index int64 -j 1
  expect_rc 0
  mkfifo "$t/fifo"
  mkdir "$t/dir"
  ln -s "$t/elsewhere" "$t/link"
  local targets=("$t/fifo" "$t/dir" "$t/link" "$dir/v2/lock" "$dir/v2/new.pack" "$dir/new.pack")
  if mknod "$t/chardev" c 1 7 2>/dev/null; then targets+=("$t/chardev"); fi
  local lock_before
  lock_before=$(stat -c %s "$dir/v2/lock")
  for target in "${targets[@]}"; do
    local type_before
    type_before=$(stat -c %F "$target" 2>/dev/null || echo absent)
    kvjit cache export "$target" --cache-dir "$dir"
    expect_rc 1
    expect_err 'refused'
    [[ $(stat -c %F "$target" 2>/dev/null || echo absent) == "$type_before" ]] || fail "$target was replaced"
  done
  [[ $(stat -c %s "$dir/v2/lock") -eq $lock_before ]] || fail "the cache's lock file changed"
  [[ ! -e "$t/elsewhere" ]] || fail "a link was followed"
  ls "$t" "$dir/v2" | grep -q 'tmp-' && fail "a temp file was left behind"
  # A regular file is replaced, whole.
  : >"$t/old.pack"
  kvjit cache export "$t/old.pack" --cache-dir "$dir"
  expect_rc 0
  [[ -s "$t/old.pack" ]] || fail "the pack was not written"
  # The manifest kvjit records to is held to the same rule.
  KVJIT_MANIFEST="$dir/v2/lock" KVJIT_LOG=1 "$KVJIT" prewarm --arch sm_90 --cache-dir "$dir" --k-row-bytes 512 \
    --index int64 -j 1 >/dev/null 2>&1 || true
  [[ $(stat -c %s "$dir/v2/lock") -eq $lock_before ]] || fail "the manifest was appended to the lock file"
}

# A URL's password (and a signed query) never shows: warnings, info, cache check.
test_issue24_url_secrets_redacted() {
  local url='http://user:PASSWORD@127.0.0.1:9/kv?X-Amz-Signature=PASSWORD&token=PASSWORD&x=1'
  local out="$TMP/redact"
  : >"$out"
  for cmd in "info" "cache check --arch sm_90 --k-row-bytes 256 --index int64" "cache path"; do
    # shellcheck disable=SC2086
    KVJIT_LOG=1 KVJIT_REMOTE_CACHE="$url bad://u:PASSWORD@h" "$KVJIT" $cmd --cache-dir "$TMP/redact-dir" >>"$out" 2>&1 || true
  done
  grep -q 'user\|\*\*\*' "$out" || fail "no remote line at all"
  if grep -q PASSWORD "$out"; then grep PASSWORD "$out" | head -3 >&2; fail "a secret was printed"; fi
  grep -q '\*\*\*@127.0.0.1:9' "$out" || fail "the redacted URL is not shown"
}

# A budget below a bundle: bundles are cut to fit (an eighth of the budget), nothing orphaned,
# everything left loadable, the dir within the budget plus one entry.
test_issue24_budget_smaller_than_a_bundle() {
  local dir="$TMP/budget"
  KVJIT_CACHE_MAX_SIZE=200K kvjit prewarm --arch sm_90,sm_100 --cache-dir "$dir" --k-row-bytes 256,512,1024,2048 \
    --index int32,int64 -j 1
  expect_rc 0
  local largest total
  largest=$(entries "$dir" | xargs -r stat -c %s | sort -n | tail -1)
  total=$(entry_bytes "$dir")
  ((total <= 204800 + largest)) || fail "$total bytes in a 200K budget"
  ((largest <= 204800 / 8 + 16384)) || fail "an entry of $largest bytes: a bundle larger than the budget allows"
  ((total >= 204800 - 2 * largest)) || fail "only $total bytes kept of a 200K budget"
  KVJIT_CACHE_MAX_SIZE=200K kvjit cache verify --cache-dir "$dir"
  expect_rc 0
  expect_out 'verified [0-9]+ entries: 0 bad$'
}

# 8 writers at once against a small budget: never more than the budget plus one entry, at least
# the budget less one largest entry per writer, no alias without its bundle, all loadable.
test_issue24_budget_eight_concurrent_writers() {
  local dir="$TMP/budget8" budget=307200 pids=() i
  for i in 0 1 2 3 4 5 6 7; do
    local rows=$((256 + 64 * i))
    KVJIT_CACHE_MAX_SIZE=300K "$KVJIT" prewarm --arch sm_90,sm_100 --cache-dir "$dir" \
      --k-row-bytes "$rows,$((rows * 2)),$((rows * 4))" --index int32,int64 -j 1 >/dev/null 2>"$TMP/w$i.err" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "writer $i failed: $(tail -2 "$TMP/w$i.err")"; done
  local largest total
  largest=$(entries "$dir" | xargs -r stat -c %s | sort -n | tail -1)
  total=$(entry_bytes "$dir")
  echo "# 8 writers, 300K budget: $total bytes kept, largest entry $largest" >&2
  ((total <= budget + largest)) || fail "$total bytes in a 300K budget"
  ((total >= budget - 8 * largest)) || fail "only $total bytes kept (lower bound $((budget - 8 * largest)))"
  KVJIT_CACHE_MAX_SIZE=300K kvjit cache verify --cache-dir "$dir"
  expect_rc 0
  expect_out 'verified [0-9]+ entries: 0 bad$'
  if grep -q orphan "$TMP/out"; then fail "an alias outlived its bundle"; fi
}

# The same prewarm with -j 1 and -j 2 (and 4) writes the same entries, key by key.
test_issue24_prewarm_entries_do_not_depend_on_j() {
  local j
  for j in 1 2 4; do
    kvjit prewarm --arch sm_90,sm_100 --cache-dir "$TMP/j$j" --k-row-bytes 256,512,1024,2048 --index int32,int64 -j $j
    expect_rc 0
    entries "$TMP/j$j" | xargs -n1 basename | sort >"$TMP/j$j.names"
  done
  [[ -s "$TMP/j1.names" ]] || fail "nothing written"
  diff "$TMP/j1.names" "$TMP/j2.names" >&2 || fail "-j 1 and -j 2 wrote different entries"
  diff "$TMP/j1.names" "$TMP/j4.names" >&2 || fail "-j 1 and -j 4 wrote different entries"
  local name
  while read -r name; do
    [[ $(stat -c %s "$TMP/j1/v2/$name") -eq $(stat -c %s "$TMP/j2/v2/$name") ]] || fail "$name differs in size"
  done <"$TMP/j1.names"
}

# Prune keeps a bundle and its aliases together; verify removes orphans and says so.
test_issue24_prune_and_verify_leave_no_orphans() {
  local dir="$TMP/orphans"
  kvjit prewarm --arch sm_90,sm_100 --cache-dir "$dir" --k-row-bytes 256,512,1024,2048 --index int32,int64 -j 1
  expect_rc 0
  kvjit cache prune --max-size 100K --cache-dir "$dir"
  expect_rc 0
  kvjit cache verify --cache-dir "$dir"
  expect_rc 0
  if grep -q orphan "$TMP/out"; then fail "prune left orphans"; fi
  # Orphans made by hand (a bundle deleted): verify removes them and says so.
  local dir2="$TMP/orphans2"
  kvjit prewarm --arch sm_90 --cache-dir "$dir2" --k-row-bytes 256,512,1024,2048 --index int32,int64 -j 1
  expect_rc 0
  kvjit cache ls --json --cache-dir "$dir2"
  local bundle
  bundle=$(grep -o '"bundle": "[0-9a-f]\{32\}"' "$TMP/out" | head -1 | grep -o '[0-9a-f]\{32\}')
  [[ -n $bundle ]] || fail "no bundle"
  rm "$dir2/v2/$bundle.kvjit"
  kvjit cache verify --cache-dir "$dir2"
  expect_rc 0
  expect_out 'aliases orphaned \(([0-9]+) removed\)'
  expect_out '\(removed\)$'
  kvjit cache verify --cache-dir "$dir2"
  if grep -q orphan "$TMP/out"; then fail "orphans left after verify"; fi
}

# --- runner -----------------------------------------------------------------------------------

run_cases
