# Sourced by run_gpu.sh (BENCH_ONLY=compare): the old per-op benches (bench_store, its
# --hot-inputs run, bench_fp8, bench_transfer and its --layers run) and the driver (bench_ops) on
# the same cells, one after the other in one run on one GPU, then ops_rows.py compare: every old
# cell must be in the driver's rows, and new / old of each median is listed (issue 28: within 3 %).
# Then, with what is left, the PyTorch peers (quick) joined to the driver's CSVs and the tables
# (ops_rows.py torch, ops_table.py): the whole path of run_gpu.sh on these cells.
# Writes $OUT/old/*.csv, $OUT/new/*/OP.csv (+ .md) and $OUT/compare.md. Uses BUILD, OUT, HERE, LOG, cap, say.

OLD="$OUT/old"
mkdir -p "$OLD"
NEW=()

# step NAME TIMEOUT RESERVE COMMAND...: one bench, bounded, into the log
step() {
  local name=$1 t
  t=$(cap "$2" "$3")
  shift 3
  say "$name (timeout $t s)"
  timeout -k 5 "$t" "$@" >> "$LOG" 2>&1
  echo "$name exit: $?" | tee -a "$LOG"
}

# ops NAME OP TIMEOUT RESERVE REPS WHERE...: the driver on OP's cells WHERE picks, into $OUT/new/NAME
ops() {
  local name=$1 op=$2 t r=$4 reps=$5 args=()
  t=$(cap "$3" "$4")
  shift 5
  for w in "$@"; do args+=(--where "$w"); done
  mkdir -p "$OUT/new/$name"
  step "bench_ops $name" "$t" "$r" "$BUILD/bench/bench_ops" --op "$op" --out "$OUT/new/$name" --reps "$reps" \
    --deadline $((t - 4)) "${args[@]}"
  [ -f "$OUT/new/$name/$op.csv" ] && NEW+=("$OUT/new/$name/$op.csv")
}

ROWS='row_bytes=128|1024|8192'
# Each old bench, then the driver on its cells (the reps each old bench used). Each step: at most
# its cap, leaving ~6 s for each step after it (an H200, 2026-12-01: the whole takes ~2.5 min).
step "bench_store --rows 128,1024,8192 --batches 1,128,65536 --index 64 --pdl on" 35 60 \
  "$BUILD/bench/bench_store" --rows 128,1024,8192 --batches 1,128,65536 --index 64 --pdl on --deadline 30 \
  --csv "$OLD/store.csv"
ops store store_kv_cache 30 54 15 "$ROWS" 'batch=1|128|65536' index=int64 pdl=on dtype=bytes inputs=dram
# bench_store measures the host cost with PDL on and off whatever the grid: the driver's cell with PDL off.
ops store_host_off store_kv_cache 12 48 15 row_bytes=1024 batch=1 index=int64 pdl=off dtype=bytes inputs=dram
step "bench_store --hot-inputs --rows 128,1024,8192 --batches 1,16 --index 64 --pdl on" 15 42 \
  "$BUILD/bench/bench_store" --hot-inputs --rows 128,1024,8192 --batches 1,16 --index 64 --pdl on --deadline 10 \
  --csv "$OLD/hot.csv"
ops hot store_kv_cache 15 36 15 "$ROWS" 'batch=1|16' inputs=hot
step "bench_fp8 --quick" 15 30 "$BUILD/bench/bench_fp8" --quick --csv "$OLD/fp8.csv"
ops fp8 store_kv_cache 50 24 7 'row_bytes=128|2048|8192' 'batch=1|16|65536' 'dtype=bf16>fp8_e4m3|bf16>fp8_e4m3/head'
step "bench_transfer --rows 2048,16384 --batches 1024,65536 --dirs d2d" 12 18 \
  "$BUILD/bench/bench_transfer" --rows 2048,16384 --batches 1024,65536 --dirs d2d --deadline 8 --csv "$OLD/transfer.csv"
ops transfer transfer_kv 25 12 7 direction=d2d 'row_bytes=2048|16384' 'batch=1024|65536' layers=1
step "bench_transfer --layers 8 --rows 2048 --batches 1024 --dirs d2h" 10 6 \
  "$BUILD/bench/bench_transfer" --layers 8 --rows 2048 --batches 1024 --dirs d2h --csv "$OLD/layers.csv"
ops layers transfer_kv 10 0 7 direction=d2h row_bytes=2048 batch=1024 layers=8

say "ops_rows.py compare"
python3 "$HERE/ops_rows.py" compare "${NEW[@]}" --store "$OLD/store.csv" --hot "$OLD/hot.csv" --fp8 "$OLD/fp8.csv" \
  --transfer "$OLD/transfer.csv" --layers "$OLD/layers.csv" > "$OUT/compare.md" 2>&1
echo "ops_rows compare exit: $?" | tee -a "$LOG"
cat "$OUT/compare.md"

step "torch_peer.py --quick" 40 40 python3 "$HERE/torch_peer.py" --lib "$KVJIT_LIB" --quick --csv "$OUT/torch.csv" \
  --deadline 30
step "torch_fp8_peer.py --quick" 30 15 env PYTHONPATH="$HERE/../python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 "$HERE/torch_fp8_peer.py" --quick --csv "$OUT/torch_fp8.csv"
step "torch_transfer_peer.py --quick" 15 0 python3 "$HERE/torch_transfer_peer.py" --quick \
  --csv "$OUT/torch_transfer.csv" --deadline 10
python3 "$HERE/ops_rows.py" torch "$OUT/new/store" --store "$OUT/torch.csv" 2>&1 | tee -a "$LOG"
python3 "$HERE/ops_rows.py" torch "$OUT/new/fp8" --fp8 "$OUT/torch_fp8.csv" 2>&1 | tee -a "$LOG"
python3 "$HERE/ops_rows.py" torch "$OUT/new/transfer" --transfer "$OUT/torch_transfer.csv" 2>&1 | tee -a "$LOG"
for f in "${NEW[@]}"; do
  python3 "$HERE/ops_table.py" "$f" --md "${f%.csv}.md" --title "$GPU_TITLE" 2>&1 | tee -a "$LOG"
done
sed -n '/^## Host cost/,/^## Cells/p' "$OUT/new/store/store_kv_cache.md" 2>/dev/null
