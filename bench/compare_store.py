#!/usr/bin/env python3
"""Compare two bench_store CSVs cell by cell: kvjit's automatic choice (split auto) per row,
batch, index type, PDL and mode (graph, stream), after / before. Prints the geometric mean of the
ratios, the worst cells and a verdict against a budget (issue 17: geo-mean within 1 %, no cell
more than 3 % slower). Run both bench_stores in one session on one GPU.

usage: compare_store.py BEFORE.csv AFTER.csv [--geo 1.01] [--cell 1.03] [--mode graph]
"""
import argparse
import csv
import math
import sys


def cells(path, mode):
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["section"] != "store" or r["impl"] != "kvjit" or r["split"] != "auto":
                continue
            if mode != "all" and r["mode"] != mode:
                continue
            key = (int(r["row_bytes"]), int(r["batch"]), r["index"], r["pdl"], r["mode"])
            out[key] = float(r["us_median"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--geo", type=float, default=1.01, help="largest geo-mean after/before")
    ap.add_argument("--cell", type=float, default=1.03, help="largest after/before of any one cell")
    ap.add_argument("--mode", default="all", help="graph, stream or all")
    args = ap.parse_args()
    before, after = cells(args.before, args.mode), cells(args.after, args.mode)
    common = sorted(set(before) & set(after))
    if not common:
        print("no common kvjit auto cells")
        return 2
    ratios = [(after[k] / before[k], k) for k in common if before[k] > 0]
    geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    worst = sorted(ratios, reverse=True)[:10]
    print(f"{len(ratios)} cells ({len(before)} before, {len(after)} after); geo-mean after/before {geo:.4f} "
          f"(budget {args.geo})")
    for r, (row, batch, index, pdl, mode) in worst:
        print(f"  {r:.4f}  row {row} batch {batch} {index} pdl {pdl} {mode}: {before[(row, batch, index, pdl, mode)]:.3f}"
              f" -> {after[(row, batch, index, pdl, mode)]:.3f} us")
    slow = [x for x in ratios if x[0] > args.cell]
    ok = geo <= args.geo and not slow
    print(f"cells slower than {args.cell}: {len(slow)}; verdict: {'within budget' if ok else 'OUT OF BUDGET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
