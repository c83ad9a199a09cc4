#!/usr/bin/env bash
# Every benchmark of bench/ in one go on a GPU machine, within a hard time budget.
#
#   usage: OUT=/some/dir bash bench/run_gpu.sh BUILD_DIR
#
# BUILD_DIR is a configured and built meson dir of this repo (bench_ops, bench_jit and
# src/libkvjit.so are rebuilt with ninja if missing). The driver, bench_ops, times every op's cells
# (kvjit, its peers, its bounds, the host cost); the PyTorch peers (torch_peer.py,
# torch_fp8_peer.py, torch_transfer_peer.py) stay Python scripts and their rows join the driver's
# CSV (ops_rows.py torch), so one table per op shows kvjit, peers and bounds per cell. Writes into $OUT:
#   store_kv_cache.csv  store_kv_cache.md  transfer_kv.csv  transfer_kv.md  store.png  jit.txt  log.txt
#   torch.csv  torch_fp8.csv  torch_transfer.csv  (the PyTorch peers' own files, merged into the above)
# BENCH_BUDGET_S (default 450) bounds the whole run; each step gets what is left, capped.
# BENCH_ONLY=store: every step but transfer_kv's; BENCH_ONLY=transfer: transfer_kv's alone (two
# calls of a machine's time limit each). BENCH_WHERE='COLUMN=V1|V2 ...': the driver's cells
# picked by column (bench_ops --where), e.g. BENCH_WHERE='row_bytes=128|1024|8192 batch=1|128|65536'.
set -u
BUILD=${1:?usage: OUT=dir bash bench/run_gpu.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd) || exit 2
OUT=${OUT:-$PWD/bench-out}
BUDGET=${BENCH_BUDGET_S:-450}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
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

if [ ! -x "$BUILD/bench/bench_ops" ] || [ ! -x "$BUILD/bench/bench_jit" ] || [ ! -e "$BUILD/src/libkvjit.so" ]; then
  say "building bench targets in $BUILD"
  timeout 120 ninja -C "$BUILD" >> "$LOG" 2>&1 || echo "ninja failed (see log)" | tee -a "$LOG"
fi

WHERE=()
for w in ${BENCH_WHERE:-}; do WHERE+=(--where "$w"); done

# bench_ops on one op: OP TIMEOUT (the deadline leaves time to write what was measured).
driver() {
  say "bench_ops --op $1 ${WHERE[*]} (timeout $2 s)"
  timeout -k 10 "$2" "$BUILD/bench/bench_ops" --op "$1" --out "$OUT" "${WHERE[@]}" --deadline $(($2 - 25)) 2>&1 |
    tee -a "$LOG"
  echo "bench_ops --op $1 exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
}

run_transfer() {
  driver transfer_kv "$(cap 240 "$1")"
  local T
  T=$(cap 90 "$1")
  say "torch_transfer_peer.py (timeout ${T} s)"
  timeout -k 10 "$T" python3 "$HERE/torch_transfer_peer.py" --csv "$OUT/torch_transfer.csv" \
    --deadline $((T - 20)) 2>&1 | tee -a "$LOG"
  echo "torch_transfer_peer exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
}

if [ "${BENCH_ONLY:-}" != transfer ]; then
  # 1. The driver on store_kv_cache (the step that matters most runs first): every cell checked,
  # then kvjit, the reference, the fixed splits, the fp8 peers, the bounds and the host cost.
  driver store_kv_cache "$(cap 300 130)"

  # 2. PyTorch's fallback and kvjit through ctypes, same process.
  T=$(cap 110 45)
  say "torch_peer.py (timeout ${T} s)"
  timeout -k 10 "$T" python3 "$HERE/torch_peer.py" --lib "$KVJIT_LIB" --csv "$OUT/torch.csv" \
    --deadline $((T - 30)) >> "$LOG" 2>&1
  echo "torch_peer exit: $?" | tee -a "$LOG"

  # 2b. The fp8 cache filled by PyTorch (divide, cast, index) vs kvjit's fused store (Python binding).
  T=$(cap 90 30)
  say "torch_fp8_peer.py (timeout ${T} s)"
  PYTHONPATH="$HERE/../python${PYTHONPATH:+:$PYTHONPATH}" timeout -k 10 "$T" python3 "$HERE/torch_fp8_peer.py" \
    --csv "$OUT/torch_fp8.csv" >> "$LOG" 2>&1
  echo "torch_fp8_peer exit: $?" | tee -a "$LOG"

  # 3. JIT latency (its own temp cache dirs; nvcc as the peer).
  T=$(cap 60 20)
  say "bench_jit (timeout ${T} s)"
  timeout -k 5 "$T" "$BUILD/bench/bench_jit" > "$OUT/jit.txt" 2>&1
  echo "bench_jit exit: $?" | tee -a "$LOG"
fi

# 4. transfer_kv, with what is left.
[ "${BENCH_ONLY:-}" = store ] || run_transfer 20

# 5. One table per op: PyTorch's rows joined to the driver's, the Markdown, the plot.
say "tables"
python3 "$HERE/ops_rows.py" torch "$OUT" --store "$OUT/torch.csv" --fp8 "$OUT/torch_fp8.csv" \
  --transfer "$OUT/torch_transfer.csv" 2>&1 | tee -a "$LOG"
for op in store_kv_cache transfer_kv; do
  [ -f "$OUT/$op.csv" ] && python3 "$HERE/ops_table.py" "$OUT/$op.csv" --md "$OUT/$op.md" --title "$GPU_TITLE" \
    2>&1 | tee -a "$LOG"
done
if [ -f "$OUT/store_kv_cache.csv" ]; then
  timeout "$(cap 40 0)" python3 "$HERE/plot.py" "$OUT/store_kv_cache.csv" "$OUT/store.png" --title "$GPU_TITLE" \
    >> "$LOG" 2>&1
  echo "plot exit: $?" | tee -a "$LOG"
fi
rm -rf "$KVJIT_CACHE_DIR"

# What the caller sees last: the verdicts.
say "summary"
for op in store_kv_cache transfer_kv; do
  [ -f "$OUT/$op.md" ] && sed -n '/^## Bounds/,/^## Cells/p' "$OUT/$op.md" | sed '$d'
done
[ -f "$OUT/jit.txt" ] && sed -n '/^cold NVRTC/,/^csv:/p' "$OUT/jit.txt" | grep -v '^csv:'
ls -la "$OUT"
say "done"
