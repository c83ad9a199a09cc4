#!/usr/bin/env bash
# transfer_kv over the host link at small batches: the plan as it is (a), two accesses per lane at
# every batch (b), PDL off for batches <= 64 over the host link (c); alternating, twice.
cd "$(dirname "$0")/.."
B=$PWD/build-gpu
export LD_LIBRARY_PATH=$B/deps:/usr/local/cuda/lib64 KVJIT_LOG=0
R=$(mktemp -d)
for round in 1 2; do for v in a b c; do
  bin=$B/bench/bench_transfer; [ $v = b ] && bin=$B/xfer/bench_transfer_b; [ $v = c ] && bin=$B/xfer/bench_transfer_c
  KVJIT_CACHE_DIR=$(mktemp -d) timeout 100 $bin --dirs d2h,h2d --rows 512,2048,4096 --batches 64,1024,4096 --csv $R/${v}_$round.csv --md $R/${v}_$round.md > $R/${v}_$round.txt 2>&1
  echo "$v $round: $(grep -E 'slower than the reference' $R/${v}_$round.md)"
done; done
python3 - "$R" <<'PY'
import csv, sys, glob, collections
R = sys.argv[1]
t = collections.defaultdict(list)
for f in glob.glob(R + "/*.csv"):
    v = f.split("/")[-1][0]
    for r in csv.DictReader(open(f)):
        if r["section"] == "bound": continue
        t[(r["direction"], int(r["row_bytes"]), int(r["batch"]), r["impl"] if r["impl"] != "kvjit" else "kvjit_" + v)].append(float(r["us_median"]))
cells = sorted({k[:3] for k in t})
print("dir row batch | a b c (kvjit, min of 2 runs) | ref_full ref_q2 (min over all runs)")
for c in cells:
    g = lambda name: min(t.get(c + (name,), [float("nan")]))
    print(c, " ".join(f"{g('kvjit_' + v):8.2f}" for v in "abc"), "|", f"{g('ref_sglang_full'):8.2f} {g('ref_sglang_q2'):8.2f}")
PY
tar czf $OUT/i.tar.gz -C $R .
