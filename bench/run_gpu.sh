#!/usr/bin/env bash
# Every benchmark of bench/ in one go on a GPU machine, within a hard time budget.
#
#   usage: OUT=/some/dir bash bench/run_gpu.sh BUILD_DIR
#
# BUILD_DIR is a configured and built meson dir of this repo (bench_ops, bench_store, bench_fp8,
# bench_jit, bench_transfer and src/libkvjit.so are rebuilt with ninja if missing). Writes into $OUT:
#   store_kv_cache.csv  store_kv_cache.md  transfer_kv.csv  transfer_kv.md  (bench_ops: the driver)
#   store.png  hot.csv  hot.md  fp8.csv  fp8.md  torch.csv  jit.txt
#   transfer.csv  transfer.md  transfer_layers.csv  transfer_layers.md  torch_transfer.csv  log.txt
# BENCH_BUDGET_S (default 450) bounds the whole run; each step gets what is left, capped.
# BENCH_ONLY=transfer runs the transfer_kv steps alone (bench_transfer and its PyTorch peer);
# BENCH_ONLY=store every step but those (two calls of a machine's time limit each).
set -u
BUILD=${1:?usage: OUT=dir bash bench/run_gpu.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd) || exit 2
OUT=${OUT:-$PWD/bench-out}
BUDGET=${BENCH_BUDGET_S:-450}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
START=$(date +%s)

left() { echo $((BUDGET - ($(date +%s) - START))); }
# cap SECONDS RESERVE: at most SECONDS, leaving RESERVE seconds for the steps after this one
cap() { local l; l=$(($(left) - $2)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 5 ] && l=5; echo "$l"; }
say() { echo "== $* ($(($(date +%s) - START)) s)" | tee -a "$LOG"; }

# A fresh kvjit cache: compile costs are part of what is measured, nothing stale is reused.
export KVJIT_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-bench-cache.XXXXXX")
export LD_LIBRARY_PATH="$BUILD/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVJIT_LIB="$BUILD/src/libkvjit.so"

say "environment"
{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  git -C "$HERE/.." log -1 --format='commit %h %s' 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv 2>&1
  command -v nvcc >/dev/null && nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1
  nproc
} >> "$LOG" 2>&1
GPU_TITLE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/, / · driver /') · $(date -u +%Y-%m-%d)"

if [ ! -x "$BUILD/bench/bench_ops" ] || [ ! -x "$BUILD/bench/bench_store" ] || [ ! -x "$BUILD/bench/bench_jit" ] || [ ! -x "$BUILD/bench/bench_fp8" ] ||
   [ ! -x "$BUILD/bench/bench_transfer" ] || [ ! -e "$BUILD/src/libkvjit.so" ]; then
  say "building bench targets in $BUILD"
  timeout 120 ninja -C "$BUILD" >> "$LOG" 2>&1 || echo "ninja failed (see log)" | tee -a "$LOG"
fi

# The transfer_kv steps: the driver's cells (kvjit, the reference at both quotas, checked), then
# bench_transfer's grid with its other peers and issue 17's targets, all layers in one launch, PyTorch.
run_transfer() {
  local T
  T=$(cap 150 "$1")
  say "bench_ops --op transfer_kv (timeout ${T} s)"
  timeout -k 10 "$T" "$BUILD/bench/bench_ops" --op transfer_kv --out "$OUT" --deadline $((T - 20)) 2>&1 | tee -a "$LOG"
  echo "bench_ops --op transfer_kv exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
  T=$(cap 200 "$1")
  say "bench_transfer (one layer per launch, timeout ${T} s)"
  timeout -k 10 "$T" "$BUILD/bench/bench_transfer" --csv "$OUT/transfer.csv" --md "$OUT/transfer.md" \
    --deadline $((T - 30)) 2>&1 | tee -a "$LOG"
  echo "bench_transfer exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
  T=$(cap 60 "$1")
  say "bench_transfer --layers 8 (timeout ${T} s)"
  timeout -k 10 "$T" "$BUILD/bench/bench_transfer" --layers 8 --rows 2048,4096 --batches 1024,4096,16384 \
    --csv "$OUT/transfer_layers.csv" --md "$OUT/transfer_layers.md" --deadline $((T - 15)) 2>&1 | tee -a "$LOG"
  echo "bench_transfer --layers 8 exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
  T=$(cap 90 "$1")
  say "torch_transfer_peer.py (timeout ${T} s)"
  local append=()
  [ -f "$OUT/transfer.md" ] && append=(--md-append "$OUT/transfer.md")
  timeout -k 10 "$T" python3 "$HERE/torch_transfer_peer.py" --csv "$OUT/torch_transfer.csv" \
    --deadline $((T - 20)) "${append[@]}" 2>&1 | tee -a "$LOG"
  echo "torch_transfer_peer exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
}
if [ "${BENCH_ONLY:-}" = transfer ]; then
  run_transfer 0
  rm -rf "$KVJIT_CACHE_DIR"
  say "summary"
  [ -f "$OUT/transfer.md" ] && cat "$OUT/transfer.md"
  [ -f "$OUT/transfer_layers.md" ] && sed -n '/^## Targets/,$p' "$OUT/transfer_layers.md"
  say "done"
  exit 0
fi

# 1. The one driver over the op table (the step that matters most runs first): every cell of
# store_kv_cache (plain and quantizing) checked, then kvjit, the reference and the bounds.
T=$(cap 300 130)
say "bench_ops --op store_kv_cache (timeout ${T} s)"
timeout -k 10 "$T" "$BUILD/bench/bench_ops" --op store_kv_cache --out "$OUT" --deadline $((T - 30)) 2>&1 | tee -a "$LOG"
echo "bench_ops exit: ${PIPESTATUS[0]}" | tee -a "$LOG"

# 1b. Quantize on store: fused vs unfused vs plain copies.
T=$(cap 120 100)
say "bench_fp8 (timeout ${T} s)"
timeout -k 10 "$T" "$BUILD/bench/bench_fp8" --csv "$OUT/fp8.csv" --md "$OUT/fp8.md" 2>&1 | tee -a "$LOG"
echo "bench_fp8 exit: ${PIPESTATUS[0]}" | tee -a "$LOG"

# 1c. Decode sizes with L2-resident inputs (the conditions of the issue's reference figures).
T=$(cap 60 90)
say "bench_store --hot-inputs (decode sizes, timeout ${T} s)"
timeout -k 10 "$T" "$BUILD/bench/bench_store" --hot-inputs --batches 1,16 --index 64 --pdl on \
  --csv "$OUT/hot.csv" --md "$OUT/hot.md" --deadline $((T - 15)) >> "$LOG" 2>&1
echo "bench_store --hot-inputs exit: $?" | tee -a "$LOG"

# 2. PyTorch's fallback and kvjit through ctypes, same process.
T=$(cap 110 45)
say "torch_peer.py (timeout ${T} s)"
MD_APPEND=()
[ -f "$OUT/store_kv_cache.md" ] && MD_APPEND=(--md-append "$OUT/store_kv_cache.md")
timeout -k 10 "$T" python3 "$HERE/torch_peer.py" --lib "$KVJIT_LIB" --csv "$OUT/torch.csv" \
  --deadline $((T - 30)) "${MD_APPEND[@]}" >> "$LOG" 2>&1
echo "torch_peer exit: $?" | tee -a "$LOG"

# 2b. The fp8 cache filled by PyTorch (divide, cast, index) vs kvjit's fused store (Python binding).
T=$(cap 90 30)
say "torch_fp8_peer.py (timeout ${T} s)"
FP8_APPEND=()
[ -f "$OUT/fp8.md" ] && FP8_APPEND=(--md-append "$OUT/fp8.md")
PYTHONPATH="$HERE/../python${PYTHONPATH:+:$PYTHONPATH}" timeout -k 10 "$T" python3 "$HERE/torch_fp8_peer.py" \
  "${FP8_APPEND[@]}" >> "$LOG" 2>&1
echo "torch_fp8_peer exit: $?" | tee -a "$LOG"

# 3. JIT latency (its own temp cache dirs; nvcc as the peer).
T=$(cap 60 20)
say "bench_jit (timeout ${T} s)"
timeout -k 5 "$T" "$BUILD/bench/bench_jit" > "$OUT/jit.txt" 2>&1
echo "bench_jit exit: $?" | tee -a "$LOG"

# 3b. transfer_kv, with what is left.
[ "${BENCH_ONLY:-}" = store ] || run_transfer 40

# 4. The plot.
T=$(cap 40 0)
say "plot.py"
if [ -f "$OUT/store_kv_cache.csv" ]; then
  TORCH_CSV=()
  [ -s "$OUT/torch.csv" ] && TORCH_CSV=(--torch "$OUT/torch.csv")
  timeout "$T" python3 "$HERE/plot.py" "$OUT/store_kv_cache.csv" "$OUT/store.png" "${TORCH_CSV[@]}" \
    --title "$GPU_TITLE" >> "$LOG" 2>&1
  echo "plot exit: $?" | tee -a "$LOG"
fi
rm -rf "$KVJIT_CACHE_DIR"

# What the caller sees last: the verdicts.
say "summary"
if [ -f "$OUT/store_kv_cache.md" ]; then
  sed -n '/^## Bounds/,/^## Cells/p' "$OUT/store_kv_cache.md" | sed '$d'
  sed -n '/^## kvjit vs the PyTorch/,$p' "$OUT/store_kv_cache.md" | head -60
fi
[ -f "$OUT/hot.md" ] && sed -n '/^## Targets/,/^## Per launch on a stream/p' "$OUT/hot.md" | sed '$d' | head -40
[ -f "$OUT/fp8.md" ] && cat "$OUT/fp8.md"
[ -f "$OUT/jit.txt" ] && sed -n '/^cold NVRTC/,/^csv:/p' "$OUT/jit.txt" | grep -v '^csv:'
[ -f "$OUT/transfer.md" ] && sed -n '/^## Bounds/,$p' "$OUT/transfer.md" | head -80
ls -la "$OUT"
say "done"
